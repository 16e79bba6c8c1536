"""Moved: the tests of vLLM's public assets are in tests/consumers/test_vllm_assets.py.

What is left is a stand-in for tests/test_vllm_assets_jobpath.py, which imports these names from here;
delete this file once it imports them from tests.vllm_site, their home now.
"""

from tests.vllm_site import FILES, SPECS, URLS, sha256

__all__ = ["FILES", "SPECS", "URLS", "sha256"]

"""Keep the test machine's own settings away from the code under test."""

from __future__ import annotations

from pathlib import Path

import pytest

# Proxy, Hub and mirror settings that must not steer the fetches under test.
NETWORK_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HF_TOKEN_FILE",
    "BAKE_MIRRORS",
)


def isolate_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, a fixed identity, and no repository above ``tmp_path``."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-global-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "bake tests")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "tests@bake.invalid")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)

"""Hostile engines against ``bake/testing``: the image under test is never pulled without its registry host.
(Round 5, issue 38: R5-4.)"""

from __future__ import annotations

import pytest

from .lying_engine import LyingEngine

pytestmark = pytest.mark.timeout(180)


def test_an_image_under_test_is_never_pulled_without_its_registry_host(
    lying_engine: LyingEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bake.testing's image (``--bake-image``) follows the same rule as harvest's ROOT."""
    from bake.testing.image import ImageUnderTest, NotInEngine

    monkeypatch.setenv("DOCKER_HOST", f"unix://{lying_engine.sock}")
    with pytest.raises(NotInEngine, match="bake pulls only an image named with its registry host"):
        ImageUnderTest("rocm/vllm-ci:latest")
    assert not [c for c in lying_engine.calls if "/images/create" in c], lying_engine.calls

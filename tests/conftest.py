"""Shared fixtures: loopback mirrors and a clean network environment for fetch tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.isolation import NETWORK_ENV
from tests.mirror import Mirror


@pytest.fixture
def clean_net_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy, Hub or mirror settings leak in from the machine running the tests."""
    for var in NETWORK_ENV:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def mirror(clean_net_env: None) -> Iterator[Mirror]:
    """A started loopback mirror with no files; tests add files and script faults."""
    with Mirror() as m:
        yield m


@pytest.fixture
def mirror2(clean_net_env: None) -> Iterator[Mirror]:
    """A second loopback mirror (another origin), for fallbacks, redirects and CDNs."""
    with Mirror() as m:
        yield m

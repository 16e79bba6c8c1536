"""Shared fixtures: loopback mirrors, a clean network environment, the engine and registries, and signing
(tests/signed.py: a key pair, a published selection; a module's own ``repository`` fixture overrides it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image import fail_or_skip
from tests.isolation import NETWORK_ENV
from tests.mirror import Mirror
from tests.registries import AuthRegistry
from tests.signed import image_cleanup, keys, published, repository  # noqa: F401 - the signing tests' fixtures


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


@pytest.fixture(scope="module")
def engine() -> None:
    """The Docker engine the registry questions go through (DOCKER_HOST from scripts/toolchain.sh env)."""
    import docker

    try:
        docker.from_env().ping()
    except Exception as exc:  # any reason the engine cannot answer
        fail_or_skip(f"no Docker engine answers ({exc}); run `scripts/toolchain.sh up` and eval its env")


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty DOCKER_CONFIG: no `docker login` of the machine leaks in."""
    config = tmp_path / "docker-config"
    config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    return config


@pytest.fixture
def auth_registry(engine: None, tmp_path: Path) -> Iterator[AuthRegistry]:
    """A second registry, with htpasswd auth, that answers 401 to anyone not logged in (as Docker Hub)."""
    root = tmp_path / "auth-registry"
    root.mkdir()
    try:
        registry = AuthRegistry(root).__enter__()
    except FileNotFoundError as exc:
        fail_or_skip(str(exc))
    yield registry
    registry.__exit__()

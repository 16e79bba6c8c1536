"""Shared fixtures: loopback mirrors, a clean network environment, the engine and registries, and signing
(tests/signed.py: a key pair, a published selection; a module's own ``repository`` fixture overrides it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub_server import LoopbackHub, tiny_hub
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


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackHub]:
    """A started loopback Hub holding the Hub tests' repositories (tests.hub_server.tiny_hub), per module."""
    with tiny_hub(tmp_path_factory.mktemp("hub")) as server:
        yield server


@pytest.fixture
def env(hub: LoopbackHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of every bake call: the loopback Hub, and caches inside tmp_path."""
    for var in (*NETWORK_ENV, "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return {
        "HF_ENDPOINT": hub.endpoint,
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }

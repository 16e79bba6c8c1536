"""Checks the running local Docker toolchain that scripts/toolchain.sh provides."""

import os
import subprocess
import urllib.request
from pathlib import Path

import docker
import pytest

pytestmark = pytest.mark.docker

REGISTRY = os.environ.get("BAKE_REGISTRY", "127.0.0.1:5000")
BASE = os.environ.get("BAKE_STANDIN_BASE", "local/rocm-standin:bookworm")
BASE_ALT = os.environ.get("BAKE_STANDIN_BASE_ALT", "local/rocm-standin:bookworm-slim")
BASE_TRIXIE = os.environ.get("BAKE_STANDIN_TRIXIE", "local/rocm-standin:trixie")
# The registry must answer on loopback even if the environment has a proxy.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def engine() -> docker.DockerClient:
    """The engine through the docker SDK; skips the module without one, or fails it when CI=true."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        message = f"the Docker engine does not answer ({exc}); run `scripts/toolchain.sh up` as root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return client


@pytest.fixture(scope="module", autouse=True)
def engine_answers(engine: docker.DockerClient) -> None:
    """Every test here needs the engine, even those that use only the CLI (buildx has no SDK)."""


def test_engine_has_no_bridge_network(engine: docker.DockerClient) -> None:
    drivers = [network.attrs["Driver"] for network in engine.networks.list()]
    assert drivers and "bridge" not in drivers


def test_buildx_bake_has_allow() -> None:
    assert "--allow" in _run("docker", "buildx", "bake", "--help").stdout


def test_bake_builds_with_host_network(tmp_path: Path) -> None:
    """Test bake files set `network = "host"`: buildx 0.13 lacks the key; the engine must allow it."""
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_ALT}\nRUN true\n")
    (tmp_path / "docker-bake.hcl").write_text(
        'target "probe" {\n  context = "."\n  network = "host"\n  no-cache = true\n'
        '  output = ["type=cacheonly"]\n}\n'
    )
    bake = _run("docker", "buildx", "bake", "--allow=network.host", "probe", cwd=tmp_path)
    assert bake.returncode == 0, bake.stderr


def test_cosign_is_trixies_from_the_distribution() -> None:
    """`bake publish --sign` and the --verify-key checks run Debian trixie's cosign (2.5.0), pinned there."""
    status = _run("dpkg-query", "-W", "-f", "${Version} ${db:Status-Status}", "cosign")
    assert status.returncode == 0, f"cosign is not installed: {status.stderr}"
    version, state = status.stdout.split()
    assert state == "installed" and version.startswith("2.5.0"), status.stdout
    assert _run("cosign", "version").returncode == 0


def test_registry_answers_on_loopback() -> None:
    with _LOOPBACK.open(f"http://{REGISTRY}/v2/", timeout=10) as response:
        assert response.status == 200


@pytest.mark.parametrize(
    ("image", "has_pip"),
    [(BASE, True), (BASE_ALT, False), (BASE_TRIXIE, False)],
    ids=["bookworm", "bookworm-slim", "trixie"],
)
def test_standin_runs_python_offline(engine: docker.DockerClient, image: str, has_pip: bool) -> None:
    probe = "import sys, importlib.util as u; print(*sys.version_info[:2], u.find_spec('pip') is not None)"
    out = engine.containers.run(image, ["python3", "-c", probe], network_mode="none", remove=True)
    major, minor, pip = out.decode().split()
    assert (int(major), int(minor)) >= (3, 10)
    assert pip == str(has_pip)


@pytest.mark.parametrize("image", [BASE, BASE_ALT], ids=["bookworm", "bookworm-slim"])
def test_standin_is_kept_in_registry(engine: docker.DockerClient, image: str) -> None:
    tag = image.rsplit(":", 1)[1]
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/rocm-standin/manifests/{tag}",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with _LOOPBACK.open(request, timeout=10) as response:
        digest = response.headers["Docker-Content-Digest"]
    assert f"{REGISTRY}/rocm-standin@{digest}" in engine.images.get(image).attrs["RepoDigests"]

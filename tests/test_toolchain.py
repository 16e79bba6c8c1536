"""Checks the running local Docker toolchain that scripts/toolchain.sh provides."""

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

REGISTRY = os.environ.get("BAKE_REGISTRY", "127.0.0.1:5000")
BASE = os.environ.get("BAKE_STANDIN_BASE", "local/rocm-standin:bookworm")
BASE_ALT = os.environ.get("BAKE_STANDIN_BASE_ALT", "local/rocm-standin:bookworm-slim")
# The registry must answer on loopback even if the environment has a proxy.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module", autouse=True)
def engine() -> None:
    """Skips the module without an engine, or fails it when CI=true."""
    if shutil.which("docker") is None:
        problem = "no docker client on PATH"
    else:
        info = _run("docker", "info", "--format", "{{.ServerVersion}}")
        problem = "" if info.returncode == 0 else f"the Docker engine does not answer: {info.stderr.strip()}"
    if problem:
        message = f"{problem}; run `scripts/toolchain.sh up` as root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_engine_has_no_bridge_network() -> None:
    drivers = _run("docker", "network", "ls", "--format", "{{.Driver}}").stdout.split()
    assert "bridge" not in drivers


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


def test_registry_answers_on_loopback() -> None:
    with _LOOPBACK.open(f"http://{REGISTRY}/v2/", timeout=10) as response:
        assert response.status == 200


@pytest.mark.parametrize(
    ("image", "has_pip"),
    [(BASE, True), (BASE_ALT, False)],
    ids=["bookworm", "bookworm-slim"],
)
def test_standin_runs_python_offline(image: str, has_pip: bool) -> None:
    probe = "import sys, importlib.util as u; print(*sys.version_info[:2], u.find_spec('pip') is not None)"
    run = _run("docker", "run", "--rm", "--network", "none", image, "python3", "-c", probe)
    assert run.returncode == 0, run.stderr
    major, minor, pip = run.stdout.split()
    assert (int(major), int(minor)) >= (3, 10)
    assert pip == str(has_pip)


@pytest.mark.parametrize("image", [BASE, BASE_ALT], ids=["bookworm", "bookworm-slim"])
def test_standin_is_kept_in_registry(image: str) -> None:
    tag = image.rsplit(":", 1)[1]
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/rocm-standin/manifests/{tag}",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with _LOOPBACK.open(request, timeout=10) as response:
        digest = response.headers["Docker-Content-Digest"]
    repo_digests = _run("docker", "image", "inspect", "--format", "{{json .RepoDigests}}", image).stdout
    assert f"{REGISTRY}/rocm-standin@{digest}" in repo_digests

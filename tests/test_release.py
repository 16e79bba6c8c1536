"""The release: ``python -m build`` makes an sdist and a wheel that install on Python 3.10, in a fresh
venv and with pipx, with no test toolchain, and the installed ``bake`` runs.

Python 3.10 is what the AMD fleet's Ubuntu 22.04 agents run. A missing 3.10 skips these tests
locally and fails them under CI=true. pip's own cache keeps reinstalls fast; nothing but the
package index is reached.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import bake
from bake.manifest import load_manifest
from tests.baked import DECLARED, FILES, serve, sha256, write_manifest
from tests.image import fail_or_skip
from tests.mirror import Mirror
from tests.pod import expectations, run_pod
from tests.registries import REGISTRY, remove_images_named
from tests.serve import SHELLS, resolved

REPO = Path(__file__).resolve().parents[1]
PY310 = "3.10.13"
STANDIN = "local/rocm-standin:bookworm"
# What a plain install may bring: bake-assets, its one dependency, and what venv seeds.
RUNTIME = {"bake-assets", "tomlkit", "pip", "setuptools", "wheel"}


@dataclass(frozen=True)
class Install:
    """Where an install put its commands, and the interpreter they run on."""

    bin: Path
    python: Path

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        """Run an installed command as a user would: no PYTHONPATH, nothing of this checkout on it."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


def _run(*cmd: str | Path, env: dict | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd[:4]))} … exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _pyenv_root() -> Path:
    if shutil.which("pyenv"):
        proc = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            return Path(proc.stdout.strip())
    return Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))


@pytest.fixture(scope="module")
def python310() -> Path:
    """A Python 3.10 interpreter: pyenv's own binary (its shim may refuse), else python3.10 on PATH."""
    candidates = [_pyenv_root() / "versions" / PY310 / "bin" / "python"]
    if found := shutil.which("python3.10"):
        candidates.append(Path(found))
    for python in candidates:
        probe = subprocess.run(
            [str(python), "-c", "import sys, venv; print(sys.version_info[:2] == (3, 10))"],
            capture_output=True,
            text=True,
            check=False,
        ) if python.exists() else None  # fmt: skip
        if probe is not None and probe.stdout.strip() == "True":
            return python
    fail_or_skip(f"no Python 3.10 (looked for {', '.join(map(str, candidates))}); `pyenv install {PY310}`")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build`` of this checkout: the sdist, then the wheel built from it."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, REPO, timeout=600)
    (sdist,) = out.glob("bake_assets-*.tar.gz")
    (wheel,) = out.glob("bake_assets-*-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module", params=["wheel", "sdist", "pipx"])
def installed(
    request: pytest.FixtureRequest,
    dist: dict[str, Path],
    python310: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Install:
    """The release on Python 3.10: the wheel or the sdist in a fresh venv, or the wheel with pipx."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "pipx":
        env = {
            **os.environ,
            "PIPX_HOME": str(root / "pipx"),
            "PIPX_BIN_DIR": str(root / "bin"),
            "PIPX_MAN_DIR": str(root / "man"),
        }
        _run(sys.executable, "-m", "pipx", "install", "--python", python310, dist["wheel"], env=env)
        return Install(root / "bin", root / "pipx" / "venvs" / "bake-assets" / "bin" / "python")
    _run(python310, "-m", "venv", root / "venv")
    python = root / "venv" / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", dist[request.param])
    return Install(root / "venv" / "bin", python)


def test_the_distribution_carries_the_one_version(dist: dict[str, Path]) -> None:
    assert dist["wheel"].name == f"bake_assets-{bake.__version__}-py3-none-any.whl"
    assert dist["sdist"].name == f"bake_assets-{bake.__version__}.tar.gz"
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## [{bake.__version__}]" in changelog, "CHANGELOG.md has no entry for this version"


def test_version(installed: Install, tmp_path: Path) -> None:
    proc = installed.run("bake", "--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"bake {bake.__version__}\n"), proc.stderr


def test_no_test_toolchain_comes_along(installed: Install) -> None:
    listing = json.loads(_run(installed.python, "-m", "pip", "list", "--format=json"))
    names = {p["name"].lower().replace("_", "-") for p in listing}
    assert names <= RUNTIME, f"a plain install brought {sorted(names - RUNTIME)}"
    assert {"bake-assets", "tomlkit"} <= names


def test_bake_entrypoint_is_the_sh_script_itself(installed: Install) -> None:
    script = installed.bin / "bake-entrypoint"
    assert script.resolve().read_bytes() == (REPO / "scripts" / "entrypoint.sh").read_bytes()
    assert os.stat(script).st_mode & 0o111 == 0o111


def test_manifest(installed: Install, tmp_path: Path) -> None:
    proc = installed.run("bake", "manifest", "--manifest", str(REPO / "docker" / "assets.toml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = json.dumps(json.loads(proc.stdout))
    for asset in load_manifest(REPO / "docker" / "assets.toml"):
        assert asset.name in names and asset.sha256 in names


def test_loopback_fetch_verify_seal_and_serve(installed: Install, mirror: Mirror, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    dest, cache = tmp_path / "dest", tmp_path / "cache"
    proc = installed.run(
        "bake", "fetch", "--manifest", str(manifest), "--dest", str(dest), "--cache-dir", str(cache),
        "--quiet", *serve(mirror), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for rel, data in FILES.items():
        assert sha256((dest / rel).read_bytes()) == sha256(data)
    verify = installed.run("bake", "verify", "--dest", str(dest), cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr
    # A native pod on this host: the installed bake-entrypoint serves what bake sealed.
    seal = installed.run("bake", "seal", "--manifest", str(manifest), "--dest", str(dest), cwd=tmp_path)
    assert seal.returncode == 0, seal.stderr
    expected = expectations({rel: sha256(data) for rel, data in FILES.items()}, DECLARED)
    pod = run_pod(
        resolved(SHELLS[0]),
        bin_dir=installed.bin,
        assets=dest,
        job_dir=tmp_path / "job",
        home=tmp_path / "home",
        expected=expected,
        python=sys.executable,
    )
    assert pod.returncode == 0, pod.stderr


# What the README may install from the index: the tools that build bake, never bake itself.
TOOLS = {"build"}


def _install_section() -> str:
    readme = (REPO / "README.md").read_text()
    return readme.split("## Install", 1)[1].split("\n## ", 1)[0]


def test_readme_installs_only_what_works_today() -> None:
    """Until a release exists, the README's install commands use a checkout or a built wheel."""
    name = re.search(r'^name = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert name and name.group(1) == "bake-assets"
    section = _install_section()
    commands = [
        line.split("#", 1)[0].strip()
        for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
        for line in block.splitlines()
    ]
    installs = [c for c in commands if re.match(r"(pip|pipx|python3? -m pip) install ", c)]
    assert installs, "the Install section shows no install command"
    for command in installs:
        target = shlex.split(command.split("&&")[0])[-1]
        if target in TOOLS:
            continue
        assert target.startswith((".", "dist/")), f"{command!r} installs from an index, where bake is not yet"
    assert "python -m build" in section
    # What the first release changes is said, in prose.
    assert re.search(r"first release.*`pip install bake-assets`", section, re.DOTALL), section


@pytest.mark.parametrize("arg", ["BASE_IMAGE", "FETCH_IMAGE"])
def test_readme_shows_the_dockerfile_default(arg: str) -> None:
    """The bake file leaves these null (the Dockerfile owns them): docs/building.md shows the real value."""
    default = re.search(rf"^ARG {arg}=(\S+)$", (REPO / "docker" / "Dockerfile").read_text(), re.MULTILINE)
    assert default, f"docker/Dockerfile has no default for {arg}"
    assert f"| `{arg}` | `{default.group(1)}` |" in (REPO / "docs" / "building.md").read_text()


@pytest.fixture(scope="module")
def with_registry_extra(
    dist: dict[str, Path], python310: Path, tmp_path_factory: pytest.TempPathFactory
) -> Install:
    """The wheel with its [registry] extra (the docker SDK), in a fresh Python 3.10 venv."""
    root = tmp_path_factory.mktemp("registry-extra")
    _run(python310, "-m", "venv", root / "venv")
    python = root / "venv" / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", f"{dist['wheel']}[registry]", timeout=600)
    return Install(root / "venv" / "bin", python)


@pytest.fixture
def release_repo(engine: None) -> Iterator[str]:
    """A repository of this test's own; the engine's copy of what is pushed there goes afterwards."""
    run_id = f"release-{uuid.uuid4().hex[:12]}"
    yield f"{REGISTRY}/bake-test/{run_id}"
    remove_images_named(run_id)


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_publish_and_pin_from_the_wheel_in_a_directory_that_is_no_checkout(
    with_registry_extra: Install, release_repo: str, mirror: Mirror, tmp_path: Path
) -> None:
    """What a pip-only user runs: publish the assets image, then pin a Dockerfile to it, on loopback."""
    write_manifest(tmp_path / "assets.toml")
    mirrors = [arg.removeprefix("--mirror=") for arg in serve(mirror) if arg.startswith("--mirror=")]
    repo = release_repo
    env = {"ASSET_MIRRORS": " ".join(mirrors), "BAKE_FETCH_ARGS": "--no-origin", "FETCH_IMAGE": STANDIN}
    if "DOCKER_HOST" in os.environ:
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    assert not (tmp_path / "bake").exists() and not (tmp_path / "docker").exists()

    def bake_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(with_registry_extra.bin / "bake"), *args], cwd=tmp_path, capture_output=True, text=True,
            timeout=600, env={"PATH": f"{with_registry_extra.bin}:/usr/local/bin:/usr/bin:/bin",
                              "HOME": str(tmp_path), **env},
        )  # fmt: skip

    selection = ["--manifest", "assets.toml", "--repository", repo, "--group", "vllm"]
    published = bake_cli("publish", *selection, "--", "--network=host", "--allow=network.host")
    assert published.returncode == 0, published.stderr[-4000:]
    digest = bake_cli("manifest", "digest", "--manifest", "assets.toml", "--group", "vllm").stdout.strip()
    # --group vllm: one unit (the vocab), the index, the whole image.
    unit, index, whole = (line.split() for line in published.stdout.splitlines())
    assert (unit[0], index[0], whole[0]) == ("unit", "index", "image")
    assert re.fullmatch(rf"{re.escape(repo)}:{digest}@sha256:[0-9a-f]{{64}}", whole[1]), whole

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM scratch AS ci_base\nCOPY --link --from={repo} / /\n")
    stale = bake_cli("pin", "--check", *selection, "Dockerfile")
    assert stale.returncode == 1 and f"Dockerfile:2: {repo} → {index[1]}" in stale.stderr, stale.stderr
    pinned = bake_cli("pin", *selection, "Dockerfile")
    assert pinned.returncode == 0, pinned.stderr
    block = "".join(f"COPY --link --from={ref} / /\n" for ref in (unit[2], index[1]))
    assert dockerfile.read_text() == f"FROM scratch AS ci_base\n{block}"
    assert bake_cli("pin", "--check", *selection, "Dockerfile").returncode == 0

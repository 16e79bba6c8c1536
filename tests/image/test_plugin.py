"""The plugin catches damage: derived images, each broken in one way, fail it with a message naming it.

Each derived image is built FROM the image under test with the docker SDK (no network), and the
plugin runs against it exactly as a team's CI would: ``pytest --pyargs bake.testing``. Last, the
plugin runs from a fresh venv holding only the built wheel and its testinfra extra.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker as docker_sdk
import pytest

from . import ASSET_ROOT, REPO, S3_ASSET, VOCAB_ASSET

pytestmark = pytest.mark.docker

TOKEN = f"hf_damage_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Damage:
    """One way to break the image: Dockerfile lines after FROM, context files, what the plugin must name."""

    name: str
    lines: str
    names: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()


DAMAGES = [
    Damage(
        "asset-bytes-changed",
        # Same size, one byte different: only the hash can tell.
        f"RUN chmod u+w {ASSET_ROOT}/{VOCAB_ASSET.path} "
        f"&& printf Z | dd of={ASSET_ROOT}/{VOCAB_ASSET.path} bs=1 seek=1000 conv=notrunc "
        f"&& chmod 0444 {ASSET_ROOT}/{VOCAB_ASSET.path}\n",
        (
            f"FAILED test_image.py::test_asset[{VOCAB_ASSET.path}]",
            f"{VOCAB_ASSET.path} ({ASSET_ROOT}/",
            f"expected {VOCAB_ASSET.sha256}",
            f"{VOCAB_ASSET.path}: FAILED",
        ),
    ),
    Damage(
        "asset-removed",
        f"RUN chmod u+w {ASSET_ROOT}/s3tokenizer && rm {ASSET_ROOT}/{S3_ASSET.path} "
        f"&& chmod 0555 {ASSET_ROOT}/s3tokenizer\n",
        (
            f"FAILED test_image.py::test_asset[{S3_ASSET.path}]",
            f"{S3_ASSET.path}: missing at {ASSET_ROOT}/",
            "FAILED test_image.py::test_location_is_served[s3tokenizer.0",
        ),
    ),
    Damage(
        "entrypoint-replaced",
        'ENTRYPOINT ["/bin/sh", "-c", "exec \\"$@\\"", "sh"]\n',
        (
            "FAILED test_image.py::test_tini_is_pid_1_and_sigterm_reaches_the_job",
            "expected tini",
            "$TIKTOKEN_RS_CACHE_DIR is unset in the job",
            "s3tokenizer at ${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer",
        ),
    ),
    Damage(
        "digest-label-from-another-manifest",
        # The drift issue 17 saw: a label set from a variable, naming other assets than the layer's.
        f"LABEL dev.bake.assets.manifest-digest={'0' * 64}\n",
        (
            "FAILED test_image.py::test_manifest_digest_label",
            "come from different manifests",
            f"label dev.bake.assets.manifest-digest is '{'0' * 64}'",
        ),
    ),
    Damage(
        "token-in-a-layer",
        "COPY notes.txt /etc/ci/notes.txt\n",
        (
            "FAILED test_image.py::test_secret_pattern_is_in_no_layer[pattern-1]",
            ": etc/ci/notes.txt",
            "--bake-secret-pattern #1 found in: layer sha256:",
        ),
        files=(("notes.txt", f"debug login {TOKEN}\n"),),
        args=("--bake-secret-pattern", TOKEN),
    ),
]


def context_tar(dockerfile: str, files: tuple[tuple[str, str], ...]) -> io.BytesIO:
    """A build context with the Dockerfile and ``files``, as the docker SDK's custom context."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in (("Dockerfile", dockerfile), *files):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def plugin(
    python: str, image: str, *args: str, cwd: Path, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``pytest --pyargs bake.testing --bake-image IMAGE`` with ``python``, where no conftest is."""
    return subprocess.run(
        [python, "-m", "pytest", "--pyargs", "bake.testing", "--bake-image", image,
         "-p", "no:cacheprovider", "-rfs", *args],
        cwd=cwd, env=env or {k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def client() -> docker_sdk.DockerClient:
    return docker_sdk.from_env()


def derived(client: docker_sdk.DockerClient, image: str, lines: str, files: tuple = ()) -> str:
    """Build ``FROM image`` plus ``lines`` offline; return its tag (the caller removes it)."""
    tag = f"bake/rocm-derived:{uuid.uuid4().hex[:12]}"
    client.images.build(
        fileobj=context_tar(f"FROM {image}\n{lines}", files), custom_context=True, tag=tag,
        network_mode="none", rm=True, forcerm=True,
    )  # fmt: skip
    return tag


# The checks each damage touches: the derived image must fail exactly these.
TOUCHED = {
    "asset-bytes-changed": {"test_asset", "test_sha256sums_checks"},
    # Doctor too: with no library installed it checks each lookup against the lock, and finds the hole.
    "asset-removed": {"test_asset", "test_sha256sums_checks", "test_location_is_served", "test_doctor"},
    # Doctor too: the declared consumer's variable is the entrypoint's to export.
    "entrypoint-replaced": {
        "test_location_is_served",
        "test_tini_is_pid_1_and_sigterm_reaches_the_job",
        "test_doctor",
    },
    "digest-label-from-another-manifest": {"test_manifest_digest_label"},
    "token-in-a-layer": {"test_secret_pattern_is_in_no_layer"},
}


@pytest.fixture(scope="module", params=DAMAGES, ids=lambda d: d.name)
def damaged(
    request: pytest.FixtureRequest,
    image: str,
    client: docker_sdk.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Damage, subprocess.CompletedProcess]]:
    """Build the derived image, run the plugin on it once, remove the image."""
    damage: Damage = request.param
    tag = derived(client, image, damage.lines, damage.files)
    try:
        yield damage, plugin(sys.executable, tag, *damage.args, cwd=tmp_path_factory.mktemp(damage.name))
    finally:
        client.images.remove(tag, force=True)


def test_damaged_image_fails_the_plugin_naming_the_damage(damaged: tuple) -> None:
    damage, proc = damaged
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-6000:]
    missing = [name for name in damage.names if name not in output]
    assert not missing, f"the plugin's output does not name {missing}:\n{output[-6000:]}"


def test_damaged_image_fails_only_the_checks_its_damage_touches(damaged: tuple) -> None:
    damage, proc = damaged
    failed = {
        line.split("::")[1].split("[")[0].split(" ")[0]
        for line in proc.stdout.splitlines()
        if line.startswith("FAILED")
    }
    assert failed == TOUCHED[damage.name], proc.stdout[-6000:]


@pytest.mark.parametrize("label", ["absent", "the lock's digest"])
def test_digest_label_is_checked_only_where_present(
    client: docker_sdk.DockerClient, image: str, label: str, tmp_path: Path
) -> None:
    """bake's image carries no digest label: not applicable, never failed. A true label passes."""
    lock = json.loads(
        client.containers.run(
            image, ["cat", f"{ASSET_ROOT}/bake.lock.json"], entrypoint=[], network_mode="none", remove=True
        )
    )
    assert "dev.bake.assets.manifest-digest" not in (client.images.get(image).labels or {})
    tag = image
    if label != "absent":
        tag = derived(client, image, f"LABEL dev.bake.assets.manifest-digest={lock['manifest_digest']}\n")
    try:
        proc = plugin(sys.executable, tag, "-v", "-rs", "-k", "test_manifest_digest_label", cwd=tmp_path)
    finally:
        if tag != image:
            client.images.remove(tag, force=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    if label == "absent":
        assert "not applicable: no dev.bake.assets.manifest-digest label" in proc.stdout, proc.stdout[-4000:]
        assert lock["manifest_digest"] in proc.stdout
    else:
        assert "test_manifest_digest_label PASSED" in proc.stdout, proc.stdout[-4000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bake's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("*.whl")
    return built


def plugin_requirements(wheel: Path) -> list[str]:
    """What to install for the plugin: the wheel's ``testinfra`` extra."""
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        declared = "Provides-Extra: testinfra" in zf.read(metadata).decode()
    # Until the packaging work declares the extra, install what it will hold.
    return [f"{wheel}[testinfra]"] if declared else [str(wheel), "pytest", "pytest-testinfra", "docker"]


@pytest.mark.timeout(900)
def test_plugin_from_a_fresh_venv_with_only_the_wheel(image: str, wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel), "pytest"], check=True, capture_output=True, timeout=300)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    # Without the extra: pytest still runs other tests, and the plugin says what to install.
    (tmp_path / "test_other.py").write_text("def test_other():\n    assert True\n")
    other = subprocess.run([python, "-m", "pytest", "-q", "test_other.py"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert other.returncode == 0, other.stdout + other.stderr
    bare = plugin(python, image, cwd=tmp_path, env=env)
    assert bare.returncode == 4 and "bake-assets[testinfra]" in bare.stdout + bare.stderr, (
        bare.stdout + bare.stderr
    )
    subprocess.run([*pip, *plugin_requirements(wheel)], check=True, capture_output=True, timeout=600)
    full = plugin(python, image, cwd=tmp_path, env=env)
    assert full.returncode == 0, full.stdout[-6000:] + full.stderr[-2000:]
    assert "test_asset[" in full.stdout or " passed" in full.stdout


@pytest.mark.timeout(900)
def test_plugin_runs_doctor_where_the_libraries_are_installed(clients_image: str, tmp_path: Path) -> None:
    # The clients image adds s3tokenizer, openai-harmony and tiktoken: no check is "not applicable".
    proc = plugin(sys.executable, clients_image, "-v", "-k", "doctor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-6000:]
    for library in ("s3tokenizer", "openai-harmony", "tiktoken"):
        assert f"test_doctor[{library}] PASSED" in proc.stdout, proc.stdout[-6000:]


# ---- --bake-local inside the pod: a container of the image, its ENTRYPOINT bypassed ---------------

# pytest and testinfra from this venv (the same CPython minor as the image's), nothing else: the
# consumer libraries stay out, so the job sees only what the image has.
PYTEST_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments", "pytest-testinfra")
RUNNER_LINE = 'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
# A native job: its job directories made by the runner, then the runner's line, then the plugin as one step.
NATIVE_STEP = f"""set -eu
export TMPDIR=/tmp/vllm-job/tmp XDG_CACHE_HOME=/tmp/vllm-native-job/cache/xdg
mkdir -p "$TMPDIR" "$XDG_CACHE_HOME"
{RUNNER_LINE}
cd "$TMPDIR"
exec python3 -m pytest -p bake.testing.plugin -p no:cacheprovider --pyargs bake.testing --bake-local -rs -v
"""


def pytest_site(target: Path) -> Path:
    """Copy PYTEST_DISTRIBUTIONS' files (their dist-info too, for testinfra's entry point) to ``target``."""
    for name in PYTEST_DISTRIBUTIONS:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            source = Path(dist.locate_file(file))
            if file.suffix == ".pyc" or ".." in file.parts or not source.is_file():
                continue
            (target / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / file)
    return target


@pytest.mark.timeout(300)
def test_local_mode_in_a_container_whose_entrypoint_the_runner_bypasses(image: str, tmp_path: Path) -> None:
    site = pytest_site(tmp_path / "site")
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "sh",
         "-v", f"{site}:/opt/pytest-site:ro", "-e", "PYTHONPATH=/opt/bake/lib:/opt/pytest-site",
         image, "-c", NATIVE_STEP],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert f"test_asset[{S3_ASSET.path}] PASSED" in proc.stdout, proc.stdout[-6000:]
    assert "test_location_is_served[tiktoken.0:$TIKTOKEN_RS_CACHE_DIR] PASSED" in proc.stdout
    summary = proc.stdout.split("bake.testing: not applicable", 1)[-1]
    assert "test_manifest_digest_label: no image labels in --bake-local mode" in summary, summary
    assert "test_tini_is_pid_1_and_sigterm_reaches_the_job: the runner bypasses the ENTRYPOINT" in summary
    # s3tokenizer is not installed there: doctor checks its lookup against the lock, and it passes.
    assert "test_doctor[s3tokenizer] PASSED" in proc.stdout, proc.stdout[-6000:]

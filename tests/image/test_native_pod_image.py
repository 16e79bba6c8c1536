"""Native pods against real build output: a container started with ``--entrypoint`` (tini and
bake-entrypoint bypassed), a host holding only the ``assets`` target's local export, and the
``tool`` image verifying that export for an agent without Python.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import bake
from tests.pod import HERE as POD_DIR
from tests.pod import expectations, install_entrypoint, run_pod
from tests.serve import SHELLS, Shell, resolved

from . import ASSET_ROOT, MANIFEST, S3_ASSET, Run, buildx_bake, engine

pytestmark = pytest.mark.docker

DECLARED = {c.name: [str(loc) for loc in c.locations] for c in MANIFEST.declared}
EXPECTED = expectations({a.path: a.sha256 for a in MANIFEST}, DECLARED)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``assets`` target's local output, as the README shows it: DIR/opt/bake/assets/…"""
    out = tmp_path_factory.mktemp("assets-output")
    buildx_bake("--set", f"assets.output=type=local,dest={out}", "assets")
    return out / ASSET_ROOT.lstrip("/")


@pytest.fixture(scope="module")
def tool_image(image: str) -> Iterator[str]:
    """The ``tool`` target (bake on a small python3, ENTRYPOINT bake), removed afterwards."""
    tag = f"bake/tool-test:{uuid.uuid4().hex[:12]}"
    buildx_bake("--set", f"tool.tags={tag}", "tool")
    yield tag
    engine().images.remove(tag, force=True)


@pytest.fixture(params=SHELLS, ids=lambda s: s.name)
def shell(request: pytest.FixtureRequest) -> Shell:
    return resolved(request.param)


def test_container_started_with_entrypoint_serves_the_job(run: Run) -> None:
    proc = run(
        "/pod/runner.sh", "/tmp/job-1", "python3", "/pod/job.py", json.dumps(EXPECTED),
        entrypoint="/bin/sh", binds={POD_DIR: "/pod"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["locations"]["s3tokenizer"]["path"] == "/tmp/job-1/cache/s3tokenizer"
    assert report["env"]["TIKTOKEN_RS_CACHE_DIR"].startswith("/tmp/job-1/tmp/")
    assert DECLARED, "the test manifest declares a consumer, which the job must find served too"


def test_container_as_another_user_serves_the_job(run: Run) -> None:
    proc = run(
        "/pod/runner.sh", "/tmp/job-1", "python3", "/pod/job.py", json.dumps(EXPECTED),
        entrypoint="/bin/sh", binds={POD_DIR: "/pod"}, user="1234:1234",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_host_with_only_the_exported_directory(shell: Shell, exported: Path, tmp_path: Path) -> None:
    pod = run_pod(
        shell,
        bin_dir=install_entrypoint(tmp_path / "bin", shell),
        assets=exported,
        job_dir=tmp_path / "job-1",
        home=tmp_path / "home",
        expected=EXPECTED,
        python=sys.executable,
    )
    assert pod.returncode == 0, pod.stderr
    assert pod.report["locations"]["s3tokenizer"]["path"] == str(tmp_path / "job-1" / "cache" / "s3tokenizer")


def _verify(tool: str, assets: Path) -> subprocess.CompletedProcess[str]:
    # The README's command for agents without Python, word for word.
    cmd = ["docker", "run", "--rm", "--network", "none", "-v", f"{assets}:/assets:ro", tool]
    return subprocess.run(
        [*cmd, "verify", "--dest", "/assets"], capture_output=True, text=True, timeout=120, check=False
    )


def test_tool_image_verifies_a_mounted_directory(tool_image: str, exported: Path, tmp_path: Path) -> None:
    copy = tmp_path / "assets"
    shutil.copytree(exported, copy, symlinks=True)
    good = _verify(tool_image, copy)
    assert good.returncode == 0, good.stderr
    damaged = copy / S3_ASSET.path
    damaged.chmod(0o644)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert hashlib.sha256(data).hexdigest() != S3_ASSET.sha256
    bad = _verify(tool_image, copy)
    assert bad.returncode == 3, bad.stderr
    assert S3_ASSET.path in bad.stderr


def test_tool_image_runs_bake_as_its_entrypoint(tool_image: str) -> None:
    config = engine().images.get(tool_image).attrs["Config"]
    assert config["Entrypoint"] == ["bake"]
    version = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", tool_image, "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert version.stdout.strip() == f"bake {bake.__version__}", version.stderr

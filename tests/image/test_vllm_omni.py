"""vLLM-Omni's shape (docker/examples/vllm-omni/), on the real engine and registry.

vLLM-Omni builds its MI300 image with plain ``docker build --target test`` (no Docker Bake file,
no ci_base, no hash wrapper) and runs its jobs natively in the pod, through its own runner. So:
``bake publish`` the assets and runtime images, ``bake pin`` the stand-in's Dockerfile.rocm,
``docker build --target test``, then the stand-in runner in a container of that image as the pod
runs it (root, ENTRYPOINT bypassed, no network): its job directories, its ``mkdir -p``, the
runner's line, and the job, in which s3tokenizer's own loader (without torch) finds the baked
checkpoint. A control run of the runner without the line shows the loader would download it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake.consumers import s3tokenizer_models
from tests.registries import REGISTRY, remove_images_named

from . import CLIENT_PROBE, PROBE_TEXT, REPO, S3_ASSET, required_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

STANDIN = REPO / "docker/examples/vllm-omni"
DOCKERFILE = "docker/Dockerfile.rocm"
MANIFEST = "docker/bake-assets.toml"
RUNNER = "/app/vllm-omni/.buildkite/amd/scripts/run-amd-test.sh"
# The repositories the committed stand-in names; each run points them at its own.
COMMITTED = "127.0.0.1:5000/vllm-omni-standin"
BASE = "local/rocm-standin:bookworm"
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]
PIN = r"COPY --link --from={repo}:(?P<tag>[0-9a-f]{{64}}|[\w.-]+)@sha256:[0-9a-f]{{64}} / /"
RUN = f"bake-omni-{uuid.uuid4().hex[:10]}"
JOB_ID = "0190f3c2-5b1e-4a7d-9c3e-omni42"
XDG = f"/tmp/vllm-omni-native-{JOB_ID}/xdg"
MODEL = S3_ASSET.path.removeprefix("s3tokenizer/").removesuffix(".onnx")


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    proc = subprocess.run(
        cmd, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{' '.join(cmd[:6])} … exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


def loader_site(target: Path) -> Path:
    """s3tokenizer's own source, its table naming the test checkpoint (as clients.Dockerfile patches it),
    tqdm, and the client probe: mounted read-only into the job, so the image gains no package."""
    origin = Path(importlib.util.find_spec("s3tokenizer").origin)
    upstream = s3tokenizer_models()[MODEL][1]
    source = origin.read_text()
    assert source.count(upstream) == 1, f"{origin}: expected {MODEL}'s sha256 {upstream} once"
    (target / "s3tokenizer").mkdir(parents=True)
    (target / "s3tokenizer/__init__.py").write_text(source.replace(upstream, S3_ASSET.sha256))
    tqdm = Path(importlib.util.find_spec("tqdm").origin).parent
    shutil.copytree(tqdm, target / "tqdm", ignore=shutil.ignore_patterns("__pycache__"))
    (target / "probe.py").write_text(CLIENT_PROBE)
    return target


@pytest.fixture(scope="module")
def omni(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Publish, pin, build --target test: the stand-in's image, its Dockerfile and its pins."""
    root = tmp_path_factory.mktemp("omni") / "vllm-omni"
    shutil.copytree(STANDIN, root)
    prefix = f"{REGISTRY}/{RUN}"
    dockerfile = root / DOCKERFILE
    dockerfile.write_text(dockerfile.read_text().replace(COMMITTED, prefix))
    env = {
        "ASSET_MIRRORS": required_env("ASSET_MIRRORS"),
        "BAKE_FETCH_ARGS": "--no-origin",
        "FETCH_IMAGE": BASE,
    }
    bake = [sys.executable, "-m", "bake"]
    selection = ["--manifest", MANIFEST, "--repository", f"{prefix}/bake-assets", "--group", "omni"]
    assets = run([*bake, "publish", *selection, *HOST_NETWORK], root, env).stdout.splitlines()
    runtime_repo = ["--runtime", "--repository", f"{prefix}/bake-runtime"]
    runtime = run([*bake, "publish", *runtime_repo, *HOST_NETWORK], root, env).stdout.strip()
    run([*bake, "pin", *selection, DOCKERFILE], root, env)
    run([*bake, "pin", *runtime_repo, DOCKERFILE], root, env)
    tag = f"{prefix}/vllm-omni:{uuid.uuid4().hex[:8]}"
    build = ["docker", "build", "-f", DOCKERFILE, "-t", tag, "--target", "test"]
    run([*build, "--build-arg", f"BASE_IMAGE={BASE}", "."], root, timeout=900)
    yield {"root": root, "prefix": prefix, "assets": assets, "runtime": runtime, "tag": tag}
    remove_images_named(RUN)


def test_the_test_stage_carries_the_pinned_lines(omni: dict) -> None:
    text = (omni["root"] / DOCKERFILE).read_text()
    stage = text.split(" AS test\n", 1)[1].split("\nFROM ", 1)[0]
    # The block: a line per unit (here the checkpoint's), then the index; then the runtime's.
    block = [line.split()[-1] for line in omni["assets"] if not line.startswith("image ")]
    lines = re.findall(PIN.format(repo=re.escape(omni["prefix"]) + "/bake-(?:assets|runtime)"), stage)
    pinned = re.findall(r"COPY --link --from=(\S+) / /", stage)
    assert len(lines) == len(pinned) == 3 and pinned == [*block, omni["runtime"]], stage
    assert COMMITTED not in text and omni["prefix"] not in text.split(" AS test\n", 1)[0]


def test_the_image_holds_the_pinned_assets(omni: dict) -> None:
    proc = run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", omni["tag"],
                "/opt/bake/assets/bake.lock.json"], REPO)  # fmt: skip
    lock = json.loads(proc.stdout)
    assert [(a["path"], a["sha256"]) for a in lock["assets"]] == [(S3_ASSET.path, S3_ASSET.sha256)]
    assert omni["assets"][-1].split("@")[0].endswith(f":{lock['manifest_digest']}")


def native_job(omni: dict, site: Path, runner: str) -> dict:
    """The pod's job: the runner (``runner`` is a shell line that runs it) in a container of the image,
    root, its ENTRYPOINT bypassed, no network; returns the client probe's report."""
    probe = f'python3 /opt/omni-site/probe.py "{PROBE_TEXT}" s3tokenizer'
    env = {"VLLM_CI_DOCKER_DISABLED": "1", "BUILDKITE_JOB_ID": JOB_ID, "BAKE_REQUIRE": "1",
           "PYTHONPATH": "/opt/omni-site", "TEST_COMMANDS": probe}  # fmt: skip
    options = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
    proc = run(["docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "/bin/bash",
                "-v", f"{site}:/opt/omni-site:ro", *options, omni["tag"], "-c", runner], REPO)  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return loader_site(tmp_path_factory.mktemp("omni-site"))


def test_s3tokenizers_loader_finds_the_baked_checkpoint_in_the_native_job(omni: dict, site: Path) -> None:
    report = native_job(omni, site, RUNNER)
    loaded = report["s3tokenizer"]
    assert loaded["ok"] and report["attempts"] == [], report
    assert report["env"]["XDG_CACHE_HOME"] == XDG, "the runner's own XDG_CACHE_HOME, never re-pointed"
    assert loaded["recorded"] == [f"{XDG}/s3tokenizer/{MODEL}.onnx"]
    assert loaded["realpaths"] == [f"/opt/bake/assets/{S3_ASSET.path}"] and loaded["warnings"] == []
    assert report["torch_imported"] is False


def test_without_the_runners_line_the_loader_would_download(omni: dict, site: Path) -> None:
    """The control: the same job, the runner's line removed, reaches for ModelScope."""
    without = f"sed '/bake-entrypoint --print-env/d' {RUNNER} > /tmp/runner && bash /tmp/runner"
    report = native_job(omni, site, without)
    assert report["attempts"] and "modelscope" in report["attempts"][0], report

"""vLLM-Omni's shape (docker/examples/vllm-omni/), on the real engine and registry.

vLLM-Omni builds its MI300 image with plain ``docker build --target test`` (no Docker Bake file,
no ci_base, no hash wrapper) and runs its jobs natively in the pod, through its own runner. So:
``bake publish`` the assets and runtime images, ``bake pin`` the stand-in's Dockerfile.rocm,
``docker build --target test``, then the stand-in runner in a container of that image as the pod
runs it (root, ENTRYPOINT bypassed, no network: every origin out of reach): its cache block as
written (XDG_CACHE_HOME job-local, HF_HOME a persistent volume of its own whose locks fail, the
job directories made by its ``mkdir -p``), the documented runner line, the job-evidence
supervisor, and the job under ``BAKE_REQUIRE=1``, in which the CosyVoice3 path's own loader,
s3tokenizer's ``load_model("speech_tokenizer_v3_25hz")`` (without torch), finds the baked
checkpoint with no download attempted. A control run of the runner without the line shows the
loader would download it.
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
from tests import nolock
from tests.pod import SNIPPET
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


HF_HOME = "/home/buildkite-agent/huggingface"


def native_job(omni: dict, site: Path, runner: str, pod: dict[str, Path]) -> dict:
    """The pod's job: the runner (``runner`` is a shell line that runs it) in a container of the image,
    root, its ENTRYPOINT bypassed, no network, HF_HOME the pod's volume (``pod["hf_home"]``, whose
    locks fail through ``pod["shim"]``), the evidence under ``pod["out"]``; returns the probe's report."""
    probe = f'python3 /opt/omni-site/probe.py "{PROBE_TEXT}" s3tokenizer'
    env = {"VLLM_CI_DOCKER_DISABLED": "1", "BUILDKITE_JOB_ID": JOB_ID, "BAKE_REQUIRE": "1",
           "VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE": "1", "VLLM_CI_JOB_EVIDENCE": "1",
           "BUILDKITE_BUILD_CHECKOUT_PATH": "/out", "PYTHONPATH": "/opt/omni-site", "TEST_COMMANDS": probe,
           "LD_PRELOAD": "/nolock/libnolock.so", "BAKE_TEST_NOLOCK_UNDER": HF_HOME}  # fmt: skip
    options = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
    mounts = {site: "/opt/omni-site", pod["hf_home"]: HF_HOME, pod["shim"].parent: "/nolock"}
    mounts[pod["out"]] = "/out"
    volumes = [arg for src, dst in mounts.items() for arg in ("--mount", f"type=bind,src={src},dst={dst}")]
    proc = run(["docker", "run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "/bin/bash",
                *volumes, *options, omni["tag"], "-c", runner], REPO)  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return loader_site(tmp_path_factory.mktemp("omni-site"))


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nolock.build(tmp_path_factory.mktemp("nolock"))


@pytest.fixture
def pod(tmp_path: Path, shim: Path) -> Iterator[dict[str, Path]]:
    """The pod's persistent HF_HOME, a filesystem of its own holding an earlier job's model, whose
    locks fail (the lock shim); and a directory for the job's evidence."""
    hf_home = nolock.ext4_volume(tmp_path, 32 * 1024 * 1024)
    (hf_home / "hub" / "models--org--earlier").mkdir(parents=True)
    (hf_home / "hub" / "models--org--earlier" / "config.json").write_bytes(b'{"earlier": true}\n')
    out = tmp_path / "out"
    out.mkdir()
    yield {"hf_home": hf_home, "shim": shim, "out": out}
    subprocess.run(["umount", "-l", str(hf_home)], check=False, capture_output=True)


def volume(path: Path) -> dict[str, bytes | str]:
    """Every entry under ``path``: a file's bytes, or "dir"."""
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else "dir" for p in path.rglob("*")}


def test_the_runner_carries_the_documented_line() -> None:
    assert SNIPPET in (STANDIN / ".buildkite/amd/scripts/run-amd-test.sh").read_text().splitlines()
    assert SNIPPET in (REPO / "docs/vllm-omni.md").read_text()


def test_s3tokenizers_loader_finds_the_baked_checkpoint_in_the_native_job(
    omni: dict, site: Path, pod: dict[str, Path]
) -> None:
    before = volume(pod["hf_home"])
    report = native_job(omni, site, RUNNER, pod)
    loaded = report["s3tokenizer"]
    assert loaded["ok"] and report["attempts"] == [], report
    assert report["env"]["XDG_CACHE_HOME"] == XDG, "the runner's own XDG_CACHE_HOME, never re-pointed"
    assert report["env"]["HF_HOME"] == HF_HOME
    assert loaded["recorded"] == [f"{XDG}/s3tokenizer/{MODEL}.onnx"]
    assert loaded["realpaths"] == [f"/opt/bake/assets/{S3_ASSET.path}"] and loaded["warnings"] == []
    assert report["torch_imported"] is False
    assert volume(pod["hf_home"]) == before  # the volume lost nothing and gained nothing
    evidence = json.loads((pod["out"] / "artifacts/rocm-job/job-result.json").read_text())
    assert evidence == {"state": "finished", "exit_code": 0}  # the job ran under the supervisor


def test_without_the_runners_line_the_loader_would_download(
    omni: dict, site: Path, pod: dict[str, Path]
) -> None:
    """The control: the same job, the runner's line removed, reaches for ModelScope."""
    edited = RUNNER.replace("run-amd-test.sh", "run-amd-test-without-line.sh")  # beside its helpers
    without = f"sed '/bake-entrypoint --print-env/d' {RUNNER} > {edited} && bash {edited}"
    report = native_job(omni, site, without, pod)
    assert report["attempts"] and "modelscope" in report["attempts"][0], report

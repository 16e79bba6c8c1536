"""vLLM's ROCm layout, as a stand-in (docker/examples/vllm/), built with bake's overlay on the real engine.

The flow is vLLM's: publish bake's assets image and runtime image, build and push ci_base
(content-hashed), build the per-commit test image from it, export the wheel for the
artifact-only flow. The tests prove the asset layer reaches ci_base and the test image, that a
wheel change neither refetches nor re-pushes it, that a fresh engine assembles a job from
ci_base plus the wheel with its assets offline, and that the plugin passes on the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import docker as docker_sdk
import pytest

from . import MANIFEST, REPO, buildx_bake, fail_or_skip, required_env

pytestmark = pytest.mark.docker

STANDIN = REPO / "docker/examples/vllm"
OVERLAY = REPO / "docker/vllm/bake-rocm.hcl"
VLLM_FILES = ["-f", "docker/docker-bake-rocm.hcl", "-f", "docker/ci-rocm.hcl", "-f", str(OVERLAY)]
BASE = "local/rocm-standin:bookworm"
# The job a GPU agent runs in the artifact-only flow: install the exported wheel into ci_base, run.
ASSEMBLE = (
    'python3 -m zipfile -e /wheels/vllm-0.0.0+standin-py3-none-any.whl "$(python3 -c '
    "'import site; print(site.getsitepackages()[0])')\" && exec python3 -m vllm.assets_job"
)


@pytest.fixture(scope="module")
def registry() -> str:
    return f"{os.environ.get('BAKE_REGISTRY', '127.0.0.1:5000')}/bake-vllm-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def client(image: str) -> docker_sdk.DockerClient:
    return docker_sdk.from_env()


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the stand-in's tree, as vLLM's checkout: local outputs (wheel-export/) land in it."""
    root = tmp_path_factory.mktemp("vllm") / "vllm"
    shutil.copytree(STANDIN, root)
    return root


@pytest.fixture(scope="module")
def runtime_image(image: str, registry: str) -> str:
    """bake's runtime target (tini, bake-entrypoint, bake), pushed as a release would push it."""
    ref = f"{registry}/bake-runtime:test"
    buildx_bake("--set", f"runtime.tags={ref}", "--set", "runtime.output=type=image,push=true", "runtime")
    return ref


@pytest.fixture(scope="module")
def assets_ref(image: str, registry: str) -> str:
    """`bake build --assets-image REPO -- … assets`: publishes REPO:<digest> (the README's first step)."""
    repo = f"{registry}/bake-assets"
    env = {
        **os.environ,
        **{n: required_env(n) for n in ("ASSET_MIRRORS", "ASSET_DIGEST", "BAKE_TEST_HF_TOKEN")},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bake", "build", "--assets-image", repo, "--",
         "-f", "docker-bake.hcl", "-f", "docker/bake-test.hcl", "--allow=network.host", "assets"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return f"{repo}:{required_env('ASSET_DIGEST')}"


def content_hash(standin: Path) -> str:
    proc = subprocess.run(
        [str(standin / "tools/ci-base-content-hash.sh")], capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def vllm_env(standin: Path, registry: str, assets_ref: str, runtime_image: str) -> dict[str, str]:
    """The variables vLLM's CI sets, plus the overlay's three."""
    repo, digest = assets_ref.rsplit(":", 1)
    return {
        "BAKE_ASSETS_REPO": repo,
        "BAKE_ASSETS_DIGEST": digest,
        "BAKE_RUNTIME_IMAGE": runtime_image,
        "BASE_IMAGE": BASE,
        "CI_BASE_CONTENT_HASH": content_hash(standin),
        "CI_BASE_IMAGE_TAG": f"{registry}/ci_base:{content_hash(standin)[:16]}",
        "CI_BASE_IMAGE": f"{registry}/ci_base:{content_hash(standin)[:16]}",
        "IMAGE_TAG": f"{registry}/test:commit-1",
    }


def vllm_bake(standin: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``docker buildx bake`` with vLLM's two files and bake's overlay, from the stand-in's root."""
    return subprocess.run(
        ["docker", "buildx", "bake", *VLLM_FILES, "--progress=plain", *args],
        cwd=standin, env={**os.environ, **env}, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def printed(standin: Path, env: dict[str, str], *targets: str) -> dict:
    proc = vllm_bake(standin, env, "--print", *targets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["target"]


@pytest.fixture(scope="module")
def built(standin: Path, vllm_env: dict[str, str], client: docker_sdk.DockerClient) -> dict[str, str]:
    """ci-base-rocm-ci, then test-rocm-ci and the artifact-only group, as vLLM's pipeline runs them."""
    for targets in (["ci-base-rocm-ci"], ["test-rocm-ci", "test-rocm-ci-with-artifacts"]):
        proc = vllm_bake(standin, vllm_env, *targets)
        assert proc.returncode == 0, proc.stderr[-4000:]
    for ref in (vllm_env["CI_BASE_IMAGE"], vllm_env["IMAGE_TAG"]):
        client.images.pull(ref)
    return {"ci_base": vllm_env["CI_BASE_IMAGE"], "test": vllm_env["IMAGE_TAG"]}


def layers(client: docker_sdk.DockerClient, ref: str) -> list[str]:
    return client.images.get(ref).attrs["RootFS"]["Layers"]


@pytest.fixture(scope="module")
def asset_layer(client: docker_sdk.DockerClient, assets_ref: str) -> str:
    client.images.pull(assets_ref)
    (layer,) = layers(client, assets_ref)
    return layer


def test_print_resolves_as_the_readme_shows(standin: Path, vllm_env: dict[str, str], assets_ref: str) -> None:
    targets = printed(standin, vllm_env, "ci-base-rocm-ci", "test-rocm-ci")
    digest = vllm_env["BAKE_ASSETS_DIGEST"]
    for name in ("ci-base-rocm-ci", "test-rocm-ci"):
        assert targets[name]["contexts"] == {
            "bake-assets": f"docker-image://{assets_ref}",
            "bake-runtime": f"docker-image://{vllm_env['BAKE_RUNTIME_IMAGE']}",
        }
        assert targets[name]["labels"]["dev.bake.assets.manifest-digest"] == digest
    assert targets["ci-base-rocm-ci"]["target"] == "ci_base"
    readme = (REPO / "docs" / "vllm.md").read_text()
    assert (
        "docker buildx bake -f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl -f bake-rocm.hcl" in readme
    )


def test_ci_base_content_hash_uses_the_manifest_digest(standin: Path, vllm_env: dict[str, str]) -> None:
    def label(**change: str) -> str:
        target = printed(standin, {**vllm_env, **change}, "ci-base-rocm")["ci-base-rocm"]
        return target["labels"]["vllm.ci_base.content_hash"]

    files_hash, digest = vllm_env["CI_BASE_CONTENT_HASH"], vllm_env["BAKE_ASSETS_DIGEST"]
    expected = hashlib.sha256(f"{files_hash}\nbake-manifest-digest {digest}\n".encode()).hexdigest()
    assert label() == expected
    assert label(BAKE_ASSETS_DIGEST="0" * 64) != expected  # another manifest: ci_base is rebuilt
    assert label(CI_BASE_CONTENT_HASH="") == ""  # vLLM's own "no hash" stays empty


def test_overlay_refuses_a_missing_digest(standin: Path, vllm_env: dict[str, str]) -> None:
    proc = vllm_bake(standin, {**vllm_env, "BAKE_ASSETS_DIGEST": ""}, "--print", "ci-base-rocm-ci")
    assert proc.returncode != 0 and "bake manifest digest" in proc.stderr


@pytest.mark.parametrize("which", ["ci_base", "test"])
def test_asset_layer_reaches_the_image(
    client: docker_sdk.DockerClient, built: dict[str, str], asset_layer: str, which: str
) -> None:
    assert asset_layer in layers(client, built[which])


def test_test_image_is_ci_base_plus_the_wheel(client: docker_sdk.DockerClient, built: dict[str, str]) -> None:
    base = layers(client, built["ci_base"])
    assert layers(client, built["test"])[: len(base)] == base


def test_plugin_passes_on_the_standin_test_image(built: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "bake.testing", "--bake-image", built["test"],
         "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert " 0 failed" not in proc.stdout and " passed" in proc.stdout, proc.stdout[-3000:]


def test_wheel_change_neither_refetches_nor_repushes_the_asset_layer(
    standin: Path,
    vllm_env: dict[str, str],
    built: dict[str, str],
    asset_layer: str,
    client: docker_sdk.DockerClient,
) -> None:
    job = standin / "vllm/assets_job.py"
    job.write_text(job.read_text() + "\n# a change to the wheel\n")
    ref = f"{vllm_env['IMAGE_TAG'].rsplit(':', 1)[0]}:commit-2"
    proc = vllm_bake(
        standin, {**vllm_env, "IMAGE_TAG": ref}, "--set", "test-rocm-ci.output=type=docker", "test-rocm-ci"
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "fetch-assets" not in proc.stderr  # bake's fetch stage is not in this graph at all
    assert layers(client, ref)[-1] != layers(client, built["test"])[-1]  # the wheel did change
    assert asset_layer in layers(client, ref)
    repo, tag = ref.rsplit(":", 1)
    short = asset_layer.removeprefix("sha256:")[:12]
    states = [
        e.get("status", "")
        for e in client.images.push(repo, tag=tag, stream=True, decode=True)
        if e.get("id") == short
    ]
    assert states and (states[-1] == "Layer already exists" or states[-1].startswith("Mounted from")), states


@pytest.fixture
def fresh_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[docker_sdk.DockerClient]:
    """A second dockerd with its own, empty data root (the main engine and its stand-ins stay untouched)."""
    dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if dockerd is None:
        fail_or_skip("dockerd is not installed; run scripts/toolchain.sh up")
    work = tmp_path_factory.mktemp("engine")
    sock = work / "d.sock"
    # fmt: off
    cmd = [dockerd, "--data-root", str(work / "data"), "--exec-root", str(work / "exec"),
           "--pidfile", str(work / "d.pid"), "--host", f"unix://{sock}",
           "--bridge=none", "--iptables=false", "--ip6tables=false",
           "--containerd-namespace", "bake-vllm", "--containerd-plugins-namespace", "bake-vllm-plugins"]
    # fmt: on
    with open(work / "dockerd.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(300):
            assert proc.poll() is None, (work / "dockerd.log").read_text()[-3000:]
            try:
                engine = docker_sdk.DockerClient(base_url=f"unix://{sock}", timeout=120)
                engine.ping()
                break
            except docker_sdk.errors.DockerException:
                time.sleep(0.1)
        yield engine
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def test_artifact_only_job_on_a_fresh_engine_gets_its_assets_offline(
    fresh_engine: docker_sdk.DockerClient, built: dict[str, str], standin: Path
) -> None:
    assert fresh_engine.images.list() == []  # nothing cached: every layer comes from the registry
    fresh_engine.images.pull(built["ci_base"])
    output = fresh_engine.containers.run(
        built["ci_base"], ["sh", "-c", ASSEMBLE], network_mode="none", remove=True,
        volumes={str(standin / "wheel-export"): {"bind": "/wheels", "mode": "ro"}},
    )  # fmt: skip
    report = json.loads(output.decode().strip().splitlines()[-1])
    baked = {prefix: {PurePosixPath(a.path).name: a.sha256 for a in MANIFEST if a.path.startswith(prefix)}
             for prefix in ("s3tokenizer/", "tiktoken/")}  # fmt: skip
    assert report == {
        "vllm": "0.0.0+standin",
        "found": {
            "s3tokenizer": baked["s3tokenizer/"],
            "TIKTOKEN_RS_CACHE_DIR": baked["tiktoken/"],
            "TIKTOKEN_CACHE_DIR": baked["tiktoken/"],
        },
    }

"""vLLM's two ways of running a test image, with the real clients and no network (vLLM's own
``get_vllm_public_assets`` too: vLLM 0.34.0's released code, mounted with tests.vllm_site):
- the native MI300 pod: the ENTRYPOINT bypassed, vLLM's runner (tests/pod/vllm-native.sh) runs
  bake's line right after its own environment is set up, with HF_HOME a persistent volume of its
  own (a loop-mounted ext4) whose locks fail with ENOLCK, already holding what earlier jobs cached;
- the docker path: the image's ENTRYPOINT first, with the runner's `-e` block and none of the job's
  directories made yet (the runner's preflight makes them after it), under BAKE_REQUIRE=1.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import nolock
from tests.hub_server import git_blob_id
from tests.pod import HERE as POD_DIR
from tests.vllm_site import make_site

from . import (
    ASSET_ROOT,
    CLIENT_PROBE,
    MANIFEST,
    PROBE_TEXT,
    PROBE_TOKENS,
    S3_ASSET,
    VOCAB_ASSET,
    VOCAB_NAME,
    run_image,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

JOB_ID = "0190a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b"  # a Buildkite job id
NATIVE_HF_HOME = "/home/buildkite-agent/huggingface"
DOCKER_HF_HOME = "/root/.cache/huggingface"
# What an earlier job left in the persistent Hub cache: a model the job reads offline.
CACHED_REPO, CACHED_COMMIT = "org/cached", "c0ffee" + "0" * 34
CACHED_FILES = {"config.json": b'{"model_type": "cached"}\n', "tokenizer.json": b'{"version": "1.0"}\n'}
CLIENTS = ("harmony", "tiktoken", "s3tokenizer", f"hub:{CACHED_REPO}")
VOCABS = [a for a in MANIFEST if a.path.startswith("tiktoken/")]
# vLLM's public test assets, each through its own asset class: the probe spec and the file it reads.
VLLM_ASSETS = {"image:stop_sign:jpg": "stop_sign.jpg", "audio:winning_call": "winning_call.ogg"}
VLLM_SITE = "/vllm-site"


def fill_persistent_cache(hf_home: Path) -> None:
    """An HF_HOME as earlier jobs leave it: a Hub model, another vocab, a token."""
    repo = hf_home / "hub" / ("models--" + CACHED_REPO.replace("/", "--"))
    for name, data in CACHED_FILES.items():
        blob = repo / "blobs" / git_blob_id(data)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / CACHED_COMMIT / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"../../blobs/{git_blob_id(data)}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(CACHED_COMMIT)
    (hf_home / "tiktoken-rs-cache").mkdir()
    (hf_home / "tiktoken-rs-cache" / ("0" * 40)).write_bytes(b"another job's vocab")
    (hf_home / "token").write_text("hf_not_a_real_token")


def tree(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under ``root``: ('link', target), ('file', sha256) or ('dir', '')."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", str(path.readlink()))
        elif path.is_file():
            out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            out[rel] = ("dir", "")
    return out


def job_commands(out: str) -> str:
    """The job: the environment it sees, then every client offline, each report into ``out``, then
    vLLM's own asset code, its HTTP download a stand-in that records and refuses."""
    probe = shlex.join(["python3", "-c", CLIENT_PROBE, PROBE_TEXT, *CLIENTS])
    vllm = shlex.join(["python3", f"{VLLM_SITE}/vllm_probe.py", *VLLM_ASSETS])
    return (
        f"env > {out}/env && HF_HUB_OFFLINE=1 {probe} > {out}/report.json"
        f" && PYTHONPATH={VLLM_SITE} {vllm} > {out}/vllm.json"
    )


def read_job(out: Path) -> tuple[dict[str, str], dict]:
    env = dict(line.split("=", 1) for line in (out / "env").read_text().splitlines() if "=" in line)
    report = json.loads((out / "report.json").read_text())
    return env, {**report, "vllm": json.loads((out / "vllm.json").read_text())}


@pytest.fixture(scope="module")
def vllm_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_site(tmp_path_factory.mktemp("vllm-site"))


def assert_vllm_served(report: dict, xdg: str) -> None:
    """vLLM's get_vllm_public_assets found each baked asset under the job-local XDG_CACHE_HOME, where
    the entrypoint linked it (VLLM_ASSETS_CACHE unset), and never reached for the bucket."""
    assert report["downloads"] == [], report
    for spec, name in VLLM_ASSETS.items():
        found = report["results"][spec]
        assert found["path"] == f"{xdg}/vllm/assets/vllm_public_assets/{name}", found
        assert found["realpath"] == f"{ASSET_ROOT}/vllm_public_assets/{name}", found


def assert_served(report: dict, hf_home: str) -> None:
    """Every client found the baked bytes, or the persistent cache's, with no download attempted."""
    for client in CLIENTS:
        assert report[client]["ok"], report[client]
    assert report["attempts"] == []
    for client in ("harmony", "tiktoken"):
        assert report[client]["tokens"] == PROBE_TOKENS
    # openai-harmony reads the verified copy bake seeded into the persistent cache; the others,
    # job-local links into the image.
    assert report["harmony"]["entries"][VOCAB_NAME] == f"{hf_home}/tiktoken-rs-cache/{VOCAB_NAME}"
    assert report["tiktoken"]["entries"][VOCAB_NAME] == f"{ASSET_ROOT}/{VOCAB_ASSET.path}"
    assert report["s3tokenizer"]["realpaths"] == [f"{ASSET_ROOT}/{S3_ASSET.path}"]
    hub = report[f"hub:{CACHED_REPO}"]
    assert sorted(hub["entries"]) == sorted(CACHED_FILES)
    assert all(p.startswith(f"{hf_home}/hub/models--org--cached/blobs/") for p in hub["entries"].values())


def assert_seeded_only(before: dict, after: dict) -> None:
    """The volume lost nothing, holds no new link, gained the vocabs' verified copies (and bake's state)."""
    for rel, entry in before.items():
        assert after.get(rel) == entry, rel
    gained = {rel: entry for rel, entry in after.items() if rel not in before}
    for vocab in VOCABS:
        assert gained.pop(f"tiktoken-rs-cache/{vocab.path.split('/')[-1]}") == ("file", vocab.sha256)
    for rel, entry in gained.items():
        assert rel.startswith("tiktoken-rs-cache/.bake") and entry[0] != "link", rel


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nolock.build(tmp_path_factory.mktemp("nolock"))


@pytest.fixture
def nfs_hf_home(tmp_path: Path) -> Iterator[Path]:
    """The pod's persistent HF_HOME: a filesystem of its own, filled by earlier jobs."""
    volume = nolock.ext4_volume(tmp_path, 64 * 1024 * 1024)
    fill_persistent_cache(volume)
    yield volume
    subprocess.run(["umount", "-l", str(volume)], check=False, capture_output=True)


def test_vllm_native_pod_serves_every_client_on_a_lockless_persistent_hf_home(
    clients_image: str, shim: Path, nfs_hf_home: Path, vllm_site: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    before = tree(nfs_hf_home)
    pod = run_image(
        clients_image, "/pod/vllm-native.sh", job_commands("/out"),
        entrypoint="/bin/bash",  # the Kubernetes agent replaces the ENTRYPOINT
        env={
            "BUILDKITE_JOB_ID": JOB_ID, "VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE": "1", "BAKE_REQUIRE": "1",
            "LD_PRELOAD": "/nolock/libnolock.so", "BAKE_TEST_NOLOCK_UNDER": NATIVE_HF_HOME,
        },
        binds={POD_DIR: "/pod", nfs_hf_home: NATIVE_HF_HOME, shim.parent: "/nolock", out: "/out",
               vllm_site: VLLM_SITE},
    )  # fmt: skip

    assert pod.returncode == 0, pod.stderr
    env, report = read_job(out)
    # The runner's variables, as it set them: nothing re-pointed, its CI variables gone.
    assert env["HF_HOME"] == NATIVE_HF_HOME
    assert env["TIKTOKEN_RS_CACHE_DIR"] == f"{NATIVE_HF_HOME}/tiktoken-rs-cache"
    assert env["XDG_CACHE_HOME"] == f"/tmp/vllm-native-{JOB_ID}/cache/xdg"
    assert env["TMPDIR"] == f"/tmp/vllm-{JOB_ID.rsplit('-', 1)[1][:12]}/tmp"
    assert env["TIKTOKEN_CACHE_DIR"].startswith(env["TMPDIR"] + "/bake-TIKTOKEN_CACHE_DIR.")
    assert not [var for var in env if var.startswith("VLLM_CI_")]
    assert_served(report, NATIVE_HF_HOME)
    assert_vllm_served(report["vllm"], env["XDG_CACHE_HOME"])
    assert_seeded_only(before, tree(nfs_hf_home))
    assert "flock on" in pod.stderr and "failed: No locks available" in pod.stderr
    assert "another copier has been copying" not in pod.stderr and "job-local" not in pod.stderr


def test_vllm_native_pod_stops_when_the_line_fails(clients_image: str, tmp_path: Path) -> None:
    # BAKE_REQUIRE=1 and nothing to serve from: the line's exit status stops the runner before the job.
    marker = tmp_path / "out"
    marker.mkdir()
    pod = run_image(
        clients_image, "/pod/vllm-native.sh", "touch /out/job-ran",
        entrypoint="/bin/bash",
        env={"BUILDKITE_JOB_ID": JOB_ID, "BAKE_REQUIRE": "1", "BAKE_ASSETS": "/nowhere"},
        binds={POD_DIR: "/pod", marker: "/out"},
    )  # fmt: skip
    assert pod.returncode == 6, pod.stderr
    assert "BAKE_REQUIRE=1" in pod.stderr
    assert not (marker / "job-ran").exists()


# The docker path's directories: the runner's -e block names them; its preflight makes them.
DOCKER_DIRS = {
    "TMPDIR": f"/tmp/vllm-{JOB_ID[:8]}/tmp",
    "TIKTOKEN_RS_CACHE_DIR": f"{DOCKER_HF_HOME}/tiktoken-rs-cache",
    "TORCHINDUCTOR_CACHE_DIR": f"/tmp/vllm-buildkite-{JOB_ID}/cache/torchinductor",
    "TRITON_CACHE_DIR": f"/tmp/vllm-buildkite-{JOB_ID}/cache/triton",
    "VLLM_CACHE_ROOT": f"/tmp/vllm-buildkite-{JOB_ID}/cache/vllm",
    "XDG_CACHE_HOME": f"/tmp/vllm-buildkite-{JOB_ID}/cache/xdg",
}
PREFLIGHT = "mkdir -p " + " ".join(f'"${var}"' for var in DOCKER_DIRS)


def _modes(paths: list[str]) -> str:
    """A shell command printing each path's mode, owner and group, one line each."""
    return "stat -c '%a %U %G' " + " ".join(shlex.quote(p) for p in paths)


def test_vllm_docker_path_serves_every_client_with_its_directories_absent(
    clients_image: str, vllm_site: Path, tmp_path: Path
) -> None:
    hf_cache = tmp_path / "huggingface"  # the agent's $(realpath ~)/huggingface
    hf_cache.mkdir()
    fill_persistent_cache(hf_cache)
    before = tree(hf_cache)
    out = tmp_path / "out"
    out.mkdir()
    made = [
        f"/tmp/vllm-{JOB_ID[:8]}",
        DOCKER_DIRS["TMPDIR"],
        f"/tmp/vllm-buildkite-{JOB_ID}",
        DOCKER_DIRS["XDG_CACHE_HOME"],
    ]
    control = [p.replace("/tmp/", "/tmp/control/", 1) for p in made]
    job = (
        f"{_modes(made)} > /out/made && mkdir -p {shlex.join(control)} && {_modes(control)} > /out/control"
        f" && {job_commands('/out')}"
    )
    container = run_image(
        clients_image, "/bin/bash", "-c", f"{PREFLIGHT} && {job}",  # the image's ENTRYPOINT runs first
        env={"HF_HOME": DOCKER_HF_HOME, **DOCKER_DIRS, "BAKE_REQUIRE": "1"},
        binds={hf_cache: DOCKER_HF_HOME, out: "/out", vllm_site: VLLM_SITE},
    )  # fmt: skip

    assert container.returncode == 0, container.stderr
    env, report = read_job(out)
    assert {var: env[var] for var in DOCKER_DIRS} == DOCKER_DIRS
    assert env["HF_HOME"] == DOCKER_HF_HOME
    assert_served(report, DOCKER_HF_HOME)
    assert_vllm_served(report["vllm"], DOCKER_DIRS["XDG_CACHE_HOME"])
    assert_seeded_only(before, tree(hf_cache))
    # What bake made before the preflight is what the runner's own mkdir -p makes.
    assert (out / "made").read_text() == (out / "control").read_text()
    assert "warning" not in container.stderr

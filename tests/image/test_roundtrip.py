"""The agent round trip: push, delete locally, pull, run a job offline beside a persistent HF_HOME."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import (
    CLIENT_PROBE,
    PROBE_TEXT,
    PROBE_TOKENS,
    VOCAB_NAME,
    docker,
    fail_or_skip,
    run_image,
    tree_snapshot,
)
from .test_entrypoint_image import seeded_only

pytestmark = pytest.mark.docker

REGISTRY = os.environ.get("BAKE_REGISTRY", "127.0.0.1:5000")
CLIENTS = ("harmony", "tiktoken", "s3tokenizer")
UNRELATED_VOCAB = "0123456789abcdef0123456789abcdef01234567"


def image_id(ref: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()


@pytest.fixture(scope="module")
def registry() -> str:
    """The loopback registry the agents pull from, once it answers."""
    try:
        # Loopback only, whatever proxy the environment names.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        opener.open(f"http://{REGISTRY}/v2/", timeout=5).close()
    except OSError as exc:
        fail_or_skip(f"the registry on {REGISTRY} does not answer ({exc}); run scripts/toolchain.sh up")
    return REGISTRY


@pytest.fixture(scope="module")
def round_trip(clients_image: str, registry: str) -> Iterator[dict]:
    """Push the clients image, delete every local tag of it, pull it back; the facts seen on the way.

    The tag is named after the image ID, so reruns of unchanged content reuse one registry tag:
    the local registry has deletion off, so a random tag would pile up there.
    """
    original = image_id(clients_image)
    remote = f"{registry}/bake-test/rocm-clients:{original.split(':')[-1][:16]}"
    docker("tag", clients_image, remote)
    docker("push", remote, timeout=900)
    local_tags = json.loads(docker("image", "inspect", "--format", "{{json .RepoTags}}", original).stdout)
    for tag in local_tags:
        docker("rmi", tag)
    still_there = docker("image", "inspect", original, check=False).returncode == 0
    docker("pull", remote, timeout=900)
    pulled = image_id(remote)
    docker("tag", remote, clients_image)  # the session's clients image, for the tests that follow
    try:
        yield {
            "remote": remote,
            "tags": local_tags,
            "still_there": still_there,
            "ids": (original, pulled),
        }
    finally:
        docker("rmi", remote, check=False)


def test_every_local_tag_was_removed_before_the_pull(round_trip: dict, clients_image: str) -> None:
    assert {clients_image, round_trip["remote"]} <= set(round_trip["tags"])
    assert round_trip["still_there"] is False


def test_pull_brings_back_the_same_image(round_trip: dict) -> None:
    original, pulled = round_trip["ids"]
    assert pulled == original


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A persistent HF_HOME volume that already holds data, like an AMD agent's."""
    hf = tmp_path_factory.mktemp("hf-home")
    model = hf / "hub" / "models--org--model"
    (model / "blobs").mkdir(parents=True)
    (model / "blobs" / "3f1c0a").write_bytes(b'{"model_type": "test"}\n')
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("abc123")
    (model / "snapshots" / "abc123").mkdir(parents=True)
    (model / "snapshots" / "abc123" / "config.json").symlink_to("../../blobs/3f1c0a")
    (hf / "hub" / ".locks").mkdir()
    (hf / "tiktoken-rs-cache").mkdir()
    (hf / "tiktoken-rs-cache" / UNRELATED_VOCAB).write_bytes(b"a vocab some other job left here\n")
    return hf


@pytest.fixture(scope="module")
def agent_job(round_trip: dict, hf_home: Path) -> dict:
    """One job from the pulled image, as vLLM's runner starts it: offline, job-local dirs, HF_HOME mounted."""
    before = tree_snapshot(hf_home)
    proc: subprocess.CompletedProcess[str] = run_image(
        round_trip["remote"],
        *("python3", "-c", CLIENT_PROBE, PROBE_TEXT, *CLIENTS),
        env={
            "HF_HOME": "/data/hf",
            "TIKTOKEN_RS_CACHE_DIR": "/data/hf/tiktoken-rs-cache",
            "TMPDIR": "/tmp/job",
            "XDG_CACHE_HOME": "/tmp/job/xdg",
        },
        binds={hf_home: "/data/hf"},
        tmpfs=["/tmp/job"],
    )
    assert proc.returncode == 0, proc.stderr
    return {"report": json.loads(proc.stdout), "before": before, "after": tree_snapshot(hf_home)}


@pytest.mark.parametrize("client", CLIENTS)
def test_agent_job_client_loads_offline(agent_job: dict, client: str) -> None:
    assert agent_job["report"][client].get("error") is None
    assert agent_job["report"][client]["ok"] is True


def test_agent_job_downloads_nothing(agent_job: dict) -> None:
    assert agent_job["report"]["attempts"] == []


def test_agent_job_vocab_encodes(agent_job: dict) -> None:
    assert agent_job["report"]["harmony"]["tokens"] == PROBE_TOKENS


def test_agent_job_harmony_reads_the_volume_seeded_with_a_verified_copy(agent_job: dict) -> None:
    harmony = agent_job["report"]["harmony"]
    assert harmony["cache"] == "/data/hf/tiktoken-rs-cache"
    # The real file there, no link: the volume was seeded with a verified copy.
    assert harmony["entries"][VOCAB_NAME] == f"/data/hf/tiktoken-rs-cache/{VOCAB_NAME}"
    assert harmony["entries"][UNRELATED_VOCAB] == f"/data/hf/tiktoken-rs-cache/{UNRELATED_VOCAB}"


def test_hf_home_gains_only_verified_copies_and_holds_no_link(agent_job: dict) -> None:
    copies = seeded_only(agent_job["before"], agent_job["after"])
    assert f"tiktoken-rs-cache/{VOCAB_NAME}" in copies


def test_hf_home_loses_no_byte(agent_job: dict) -> None:
    for rel, entry in agent_job["before"].items():
        assert agent_job["after"][rel][:4] == entry[:4] or stat.S_ISDIR(entry[0]), rel

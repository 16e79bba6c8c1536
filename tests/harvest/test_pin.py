"""bake/harvest/pin.py: what the caches hold turned into manifest entries against the manifest as it is:
a new manifest started, an existing one's text kept, a pinned commit's new files added, another commit
reported and never re-pinned."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake.consumers import sha1_name
from bake.manifest import load_manifest
from tests.harvest.conftest import (
    CHECKPOINT,
    CONFIG,
    S3_URL,
    VOCAB,
    VOCAB_URL,
    WEIGHTS,
    download,
    harvest,
    known_vocab,
)
from tests.hub_server import LoopbackHub

pytestmark = pytest.mark.timeout(120)


def test_a_new_manifest_pins_what_the_job_read(job: Path, tmp_path: Path, s3_table: str) -> None:
    manifest = tmp_path / "new" / "assets.toml"
    manifest.parent.mkdir()
    proc = harvest(job, "--manifest", manifest, "--group", "ci", pythonpath=s3_table)
    assert proc.returncode == 0, proc.stderr
    assets = load_manifest(manifest)
    by_path = {a.path: a for a in assets}
    checkpoint = by_path["s3tokenizer/speech_tokenizer_test.onnx"]
    assert checkpoint.urls == (S3_URL,)
    assert checkpoint.sha256 == hashlib.sha256(CHECKPOINT).hexdigest() and checkpoint.groups == ("ci",)
    (entry,) = {e for a in assets if a.hub for e in a.hub.entries}
    assert (
        entry.repo == "org/tiny"
        and entry.ref == "main"
        and entry.include == ("config.json", "model.safetensors")
    )
    assert {f.path: f.sha256 for f in entry.files} == {
        "config.json": hashlib.sha256(CONFIG).hexdigest(),
        "model.safetensors": hashlib.sha256(WEIGHTS).hexdigest(),
    }
    # The vocab's URL is known to no table here (it is not a real encoding): never pinned.
    assert not any(a.path.startswith("tiktoken/") for a in assets)


def test_an_existing_manifest_keeps_its_text_and_a_second_harvest_adds_nothing(
    job: Path, tmp_path: Path, s3_table: str
) -> None:
    manifest = tmp_path / "assets.toml"
    known_vocab(manifest)
    before = manifest.read_text()
    partial = job / "tiktoken-rs-cache" / f"{sha1_name(VOCAB_URL)}.1f2e.tmp"
    partial.write_bytes(VOCAB[:3])
    first = harvest(job, "--manifest", manifest, pythonpath=s3_table)
    assert first.returncode == 0, first.stderr
    assert f"{partial}: no URL known here gives tiktoken this name" in first.stderr
    text = manifest.read_text()
    assert text.startswith(before), "the existing entry and comment must survive byte for byte"
    assert "test_base" not in first.stdout, "an entry already there is left as it is"
    second = harvest(job, "--manifest", manifest, pythonpath=s3_table)
    assert second.returncode == 0, second.stderr
    assert manifest.read_text() == text and "nothing new to pin" in second.stdout


def test_the_same_commit_gains_the_files_a_later_run_read(
    hub: LoopbackHub, job: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "assets.toml"
    assert harvest(job / "huggingface", "--manifest", manifest).returncode == 0
    download(
        hub,
        job / "huggingface",
        "from huggingface_hub import hf_hub_download\nhf_hub_download('org/tiny', 'tokenizer/vocab.txt')\n",
    )
    proc = harvest(job / "huggingface", "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert "added 1 file(s) to hub org/tiny@" in proc.stdout
    (entry,) = {e for a in load_manifest(manifest) if a.hub for e in a.hub.entries}
    assert {f.path for f in entry.files} == {"config.json", "model.safetensors", "tokenizer/vocab.txt"}
    assert "tokenizer/vocab.txt" in entry.include


def test_another_commit_is_reported_not_repinned(hub: LoopbackHub, job: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    assert harvest(job / "huggingface", "--manifest", manifest).returncode == 0
    text = manifest.read_text()
    newer = hub.commit("org/tiny", {"config.json": b'{"newer": 1}\n'}, ref="next")
    try:
        download(
            hub,
            job / "huggingface",
            "from huggingface_hub import hf_hub_download\n"
            "hf_hub_download('org/tiny', 'config.json', revision='next')\n",
        )
    finally:
        hub.repos[("model", "org/tiny")]["refs"].pop("next")
    proc = harvest(job / "huggingface", "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert (
        f"org/tiny@{newer}: the manifest pins org/tiny at" in proc.stderr and "not re-pinned" in proc.stderr
    )
    assert manifest.read_text() == text

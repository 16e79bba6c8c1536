"""bake/harvest/diff.py: ``bake harvest --diff ROOT`` against a sealed root: clean when the root bakes
what the caches hold, the one more model named, and a file the lock holds counted as baked."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake.consumers import sha1_name
from tests.harvest.conftest import CHECKPOINT, S3_URL, VOCAB_URL, bare_harvest, download, harvest, known_vocab
from tests.hub_server import LoopbackHub
from tests.runners import bake

pytestmark = pytest.mark.timeout(120)


def test_diff_of_the_same_caches_is_clean_and_names_one_more_model(
    hub: LoopbackHub, job: Path, tmp_path: Path, s3_table: str
) -> None:
    manifest = tmp_path / "assets.toml"
    known_vocab(manifest)
    assert harvest(job, "--manifest", manifest, pythonpath=s3_table).returncode == 0
    # Fetched from the loopback Hub and file:// (the checkpoint's origin stands in as a local copy).
    text = manifest.read_text()
    for url, path in (
        (S3_URL, "s3tokenizer/speech_tokenizer_test.onnx"),
        (VOCAB_URL, f"tiktoken-rs-cache/{sha1_name(VOCAB_URL)}"),
    ):
        text = text.replace(f'"{url}"', f'"{url}", "{(job / path).as_uri()}"')
    fetchable = tmp_path / "fetchable.toml"
    fetchable.write_text(text)
    dest = tmp_path / "dest"
    env = {"PYTHONPATH": s3_table, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_XET": "1"}
    env |= {"XDG_CACHE_HOME": str(tmp_path / "bake-cache"), "HF_HOME": str(tmp_path / "bake-hf")}
    for args in (("fetch", "-q", "--dest", dest), ("seal", "--dest", dest)):
        proc = bake(*args, "--manifest", fetchable, env=env)
        assert proc.returncode == 0, proc.stderr
    clean = harvest("--diff", dest, job, "--manifest", manifest, pythonpath=s3_table)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    download(
        hub,
        job / "huggingface",
        "from huggingface_hub import snapshot_download\nsnapshot_download('org/extra')\n",
    )
    proc = harvest("--diff", dest, job, "--manifest", manifest, pythonpath=s3_table)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.count("[[hub]]") == 1 and 'repo = "org/extra"' in proc.stdout
    assert "[[asset]]" not in proc.stdout


@pytest.mark.parametrize("library", ["without s3tokenizer", "with s3tokenizer's table rejecting it"])
def test_diff_counts_a_file_the_lock_holds_as_baked(tmp_path: Path, library: str) -> None:
    """The lock holds the checkpoint's path and sha256: baked, whether or not harvest could pin it."""
    src = tmp_path / "ckpt.onnx"
    src.write_bytes(CHECKPOINT)
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        '[[asset]]\nname = "speech_tokenizer_v3_25hz"\npath = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"\n'
        f'sha256 = "{hashlib.sha256(CHECKPOINT).hexdigest()}"\nurls = ["{src.as_uri()}"]\n'
    )
    root = tmp_path / "root"
    for command in ("fetch", "seal"):
        proc = bake(
            command,
            "--manifest",
            manifest,
            "--dest",
            root,
            *(("--cache-dir", tmp_path / "c") if command == "fetch" else ()),
        )
        assert proc.returncode == 0, proc.stderr
    xdg = tmp_path / "xdg"
    (xdg / "s3tokenizer").mkdir(parents=True)
    (xdg / "s3tokenizer" / "speech_tokenizer_v3_25hz.onnx").write_bytes(CHECKPOINT)
    run = bare_harvest if library == "without s3tokenizer" else harvest
    proc = run("--diff", root, xdg)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "has everything the caches hold" in proc.stdout, proc.stdout
    (xdg / "s3tokenizer" / "speech_tokenizer_v3_25hz.onnx").write_bytes(CHECKPOINT + b"changed")
    proc = run("--diff", root, xdg)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "speech_tokenizer_v3_25hz.onnx" in proc.stderr

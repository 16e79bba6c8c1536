"""``bake manifest``: the resolved manifest as JSON, its digest, and ``check`` against the installed
consumers (bake/commands/manifest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.commands.conftest import DECLARED
from tests.runners import bake


def test_manifest_prints_resolved_json_and_digest() -> None:
    out = bake("manifest", "--group", "vllm")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [a["name"] for a in doc["assets"]] == ["o200k_base"]
    digest = bake("manifest", "digest", "--group", "vllm").stdout.strip()
    assert digest == doc["manifest_digest"]
    assert len(digest) == 64


def test_manifest_check_flags_the_test_checkpoint() -> None:
    assert bake("manifest", "check").returncode == 0
    bad = bake("manifest", "check", "--manifest", "tests/image/assets.toml")
    assert bad.returncode == 2
    assert "MISMATCH  s3tokenizer  speech_tokenizer_v3_25hz" in bad.stdout


def test_manifest_check_names_the_declared_consumer(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(DECLARED)
    proc = bake("manifest", "check", "--manifest", str(manifest), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Nothing was judged: a warning on stderr, no result on stdout.
    assert "none is declared" not in proc.stderr and not proc.stdout
    assert "the declared consumer(s) whisper carry no table" in proc.stderr

"""Consumer tables (read without importing torch) and the offline doctor.

These run against the real s3tokenizer (installed --no-deps), tiktoken and
openai-harmony packages that the test command installs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake import consumers, lockfile, manifest

REPO = Path(__file__).resolve().parents[1]
VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
VOCAB_NAME = hashlib.sha1(VOCAB_URL.encode()).hexdigest()


def test_s3tokenizer_table_is_read_without_running_the_module() -> None:
    probe = (
        "import sys, json; from bake import consumers; t = consumers.s3tokenizer_table(); "
        "print(json.dumps([t['speech_tokenizer_v3_25hz'], "
        "'s3tokenizer' in sys.modules, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    entry, imported_s3, imported_torch = __import__("json").loads(out.stdout)
    assert entry == [
        "https://www.modelscope.cn/models/FunAudioLLM/Fun-CosyVoice3-0.5B-2512/resolve/master/speech_tokenizer_v3.onnx",
        "23236a74175dbdda47afc66dbadd5bcb41303c467a57c261cb8539ad9db9208d",
    ]
    assert (imported_s3, imported_torch) == (False, False)


def test_tiktoken_table_has_o200k() -> None:
    assert (
        consumers.tiktoken_table()[VOCAB_URL]
        == "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    )


def test_production_manifest_matches_installed_consumers() -> None:
    findings = consumers.check_manifest(manifest.load_manifest(REPO / "docker/assets.toml"))
    assert {(f.consumer, f.asset, f.ok) for f in findings} == {
        ("s3tokenizer", "speech_tokenizer_v3_25hz", True),
        ("tiktoken", "o200k_base", True),
    }


def test_test_manifest_checkpoint_disagrees_with_s3tokenizer() -> None:
    findings = consumers.check_manifest(manifest.load_manifest(REPO / "tests/image/assets.toml"))
    bad = [f for f in findings if not f.ok]
    assert [(f.consumer, f.asset) for f in bad] == [("s3tokenizer", "speech_tokenizer_v3_25hz")]
    assert "23236a74" in bad[0].detail


@pytest.fixture
def baked(tmp_path: Path) -> tuple[Path, list[lockfile.LockedFile]]:
    root = tmp_path / "assets"
    files = {"s3tokenizer/speech_tokenizer_v3_25hz.onnx": b"checkpoint", f"tiktoken/{VOCAB_NAME}": b"vocab"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root, [lockfile.LockedFile(r, len(d), hashlib.sha256(d).hexdigest()) for r, d in files.items()]


def serve_locations(tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point every consumer location at links to the baked files, as bake-entrypoint does."""
    for var, sub, rel in [
        ("XDG_CACHE_HOME", "xdg/s3tokenizer", "s3tokenizer/speech_tokenizer_v3_25hz.onnx"),
        ("TIKTOKEN_RS_CACHE_DIR", "rs", f"tiktoken/{VOCAB_NAME}"),
        ("TIKTOKEN_CACHE_DIR", "py", f"tiktoken/{VOCAB_NAME}"),
    ]:
        where = tmp_path / sub
        where.mkdir(parents=True)
        (where / Path(rel).name).symlink_to(root / rel)
        monkeypatch.setenv(var, str(where.parent if var == "XDG_CACHE_HOME" else where))


def test_doctor_accepts_served_locations(tmp_path, baked, monkeypatch) -> None:
    root, files = baked
    serve_locations(tmp_path, root, monkeypatch)
    monkeypatch.setattr(
        consumers, "s3tokenizer_table", lambda: {"speech_tokenizer_v3_25hz": ("https://x", files[0].sha256)}
    )
    findings = consumers.doctor(root, files)
    assert {(f.consumer, f.ok) for f in findings} == {
        ("s3tokenizer", True),
        ("openai-harmony", True),
        ("tiktoken", True),
    }


def test_doctor_flags_a_table_hash_mismatch(tmp_path, baked, monkeypatch) -> None:
    root, files = baked
    serve_locations(tmp_path, root, monkeypatch)
    (finding,) = [f for f in consumers.doctor(root, files) if f.consumer == "s3tokenizer"]
    assert not finding.ok
    assert "re-download" in finding.detail


@pytest.mark.parametrize("var", ["TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"])
def test_doctor_flags_an_unserved_vocab_location(tmp_path, baked, monkeypatch, var: str) -> None:
    root, files = baked
    serve_locations(tmp_path, root, monkeypatch)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(var, str(empty))
    consumer = "openai-harmony" if var == "TIKTOKEN_RS_CACHE_DIR" else "tiktoken"
    (finding,) = [f for f in consumers.doctor(root, files) if f.consumer == consumer]
    assert not finding.ok
    assert "would download" in finding.detail


def test_doctor_flags_wrong_bytes_at_the_lookup_path(tmp_path, baked, monkeypatch) -> None:
    root, files = baked
    serve_locations(tmp_path, root, monkeypatch)
    rs = Path(os.environ["TIKTOKEN_RS_CACHE_DIR"]) / VOCAB_NAME
    rs.unlink()
    rs.write_bytes(b"stale vocab")
    (finding,) = [f for f in consumers.doctor(root, files) if f.consumer == "openai-harmony"]
    assert not finding.ok
    assert hashlib.sha256(b"stale vocab").hexdigest() in finding.detail


def test_relative_xdg_resolves_against_cwd(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    assert consumers.s3tokenizer_root() == tmp_path / "rel/s3tokenizer"

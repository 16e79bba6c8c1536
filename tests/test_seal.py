"""bake.seal: alias links, bake.serve and read-only modes."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from bake import consumers, index, manifest, seal, verify
from bake.errors import UsageError, VerifyError
from bake.manifest import Asset, parse_manifest
from tests.baked import O200K_URL as VOCAB_URL
from tests.baked import SMALL_FILES as FILES
from tests.baked import VOCAB_NAME, make_dest

REPO = Path(__file__).resolve().parents[1]


def test_alias_links_use_the_url_file_name() -> None:
    assets = [
        Asset("v", f"tiktoken/{VOCAB_NAME}", "0" * 64, (VOCAB_URL,)),
        Asset("m", "x/m", "0" * 64, ("file:///m",)),
    ]
    assert seal.alias_links(assets) == {"tiktoken/o200k_base.tiktoken": VOCAB_NAME}


def test_seal_links_and_makes_read_only(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    index.write_index(dest, assets)
    seal.seal(dest, assets)
    seal.seal(dest, assets)  # idempotent
    link = dest / "tiktoken/o200k_base.tiktoken"
    assert os.readlink(link) == VOCAB_NAME
    assert link.read_bytes() == FILES[f"tiktoken/{VOCAB_NAME}"]
    modes = {
        str(p.relative_to(dest)): stat.S_IMODE(p.lstat().st_mode)
        for p in [dest, *dest.rglob("*")]
        if not p.is_symlink()
    }
    assert modes == {
        ".": 0o555,
        "s3tokenizer": 0o555,
        "tiktoken": 0o555,
        "SHA256SUMS": 0o444,
        "bake.lock.json": 0o444,
        "bake.serve": 0o444,
        "s3tokenizer/m.onnx": 0o444,
        f"tiktoken/{VOCAB_NAME}": 0o444,
    }
    for p in [dest, *dest.rglob("*")]:  # let pytest clean up
        if not p.is_symlink():
            p.chmod(0o755)


def test_seal_refuses_unfetched_dest(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="run `bake fetch`"):
        seal.seal(tmp_path, [])


def test_seal_refuses_a_foreign_file_at_the_link_path(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    index.write_index(dest, assets)
    (dest / "tiktoken/o200k_base.tiktoken").write_bytes(b"someone else's")
    with pytest.raises(UsageError, match="expected a link"):
        seal.seal(dest, assets)


STOPWORDS_SHA = hashlib.sha256(b"a\nthe\n").hexdigest()
# A manifest with both built-ins, a declared consumer with nested files, and an asset no consumer owns.
SERVED_MANIFEST = f"""
[[consumer]]
name = "nltk"
locations = ["$NLTK_DATA"]

[[consumer]]
name = "whisper"
locations = ["${{XDG_CACHE_HOME:-$HOME/.cache}}/whisper", "${{WHISPER_HOME:-/opt/whisper}}/models"]

[[asset]]
name = "m"
path = "s3tokenizer/m.onnx"
sha256 = "{hashlib.sha256(b"model").hexdigest()}"
urls = ["https://example.org/m.onnx"]

[[asset]]
name = "o200k_base"
path = "tiktoken/{VOCAB_NAME}"
sha256 = "{hashlib.sha256(b"vocab!").hexdigest()}"
urls = ["{VOCAB_URL}"]

[[asset]]
name = "stopwords"
path = "nltk/corpora/stopwords/english"
sha256 = "{STOPWORDS_SHA}"
urls = ["https://example.org/english"]

[[asset]]
name = "base"
path = "whisper/base.pt"
sha256 = "{hashlib.sha256(b"weights").hexdigest()}"
urls = ["https://example.org/base.pt"]

[[asset]]
name = "loose"
path = "other/loose.bin"
sha256 = "{hashlib.sha256(b"loose").hexdigest()}"
urls = ["https://example.org/loose"]
"""
SERVED_FILES = {
    "s3tokenizer/m.onnx": b"model",
    f"tiktoken/{VOCAB_NAME}": b"vocab!",
    "nltk/corpora/stopwords/english": b"a\nthe\n",
    "whisper/base.pt": b"weights",
    "other/loose.bin": b"loose",
}
EXPECTED_SERVE = (
    "# bake serve v1\n"
    "loc\tnltk.0\tnltk\texport\tNLTK_DATA\t\t\n"
    "loc\ts3tokenizer.0\ts3tokenizer\tunder\tXDG_CACHE_HOME\ts3tokenizer\t$HOME/.cache\n"
    "loc\ttiktoken.0\ttiktoken\texport\tTIKTOKEN_RS_CACHE_DIR\t\t\n"
    "loc\ttiktoken.1\ttiktoken\texport\tTIKTOKEN_CACHE_DIR\t\t\n"
    "loc\twhisper.0\twhisper\tunder\tXDG_CACHE_HOME\twhisper\t$HOME/.cache\n"
    "loc\twhisper.1\twhisper\tunder\tWHISPER_HOME\tmodels\t/opt/whisper\n"
    "file\tnltk.0\tnltk/corpora/stopwords/english\tcorpora/stopwords/english\t6\t\n"
    "file\ts3tokenizer.0\ts3tokenizer/m.onnx\tm.onnx\t5\t\n"
    f"file\ttiktoken.0\ttiktoken/{VOCAB_NAME}\t{VOCAB_NAME}\t6\t\n"
    f"file\ttiktoken.1\ttiktoken/{VOCAB_NAME}\t{VOCAB_NAME}\t6\t\n"
    "file\twhisper.0\twhisper/base.pt\tbase.pt\t7\t\n"
    "file\twhisper.1\twhisper/base.pt\tbase.pt\t7\t\n"
)


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, list[Asset]]:
    dest = tmp_path / "dest"
    for rel, data in SERVED_FILES.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    assets = parse_manifest(SERVED_MANIFEST)
    index.write_index(dest, assets)
    yield dest, assets
    for p in [dest, *dest.rglob("*")]:  # let pytest clean up
        if not p.is_symlink():
            p.chmod(0o755)


def test_seal_writes_bake_serve_for_the_entrypoint(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    seal.seal(dest, assets)
    assert (dest / "bake.serve").read_text() == EXPECTED_SERVE
    assert stat.S_IMODE((dest / "bake.serve").stat().st_mode) == 0o444
    seal.seal(dest, manifest.Assets(reversed(assets), assets.declared))  # idempotent, any order
    assert (dest / "bake.serve").read_text() == EXPECTED_SERVE


def test_no_field_of_bake_serve_holds_a_tab_or_newline(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    seal.seal(dest, assets)
    lines = (dest / "bake.serve").read_bytes().split(b"\n")
    assert lines[-1] == b""
    fields = {"loc": 7, "file": 6, "link": 4}
    for line in lines[1:-1]:
        kind = line.split(b"\t")[0].decode()
        assert len(line.split(b"\t")) == fields[kind], line


def test_an_asset_no_consumer_owns_is_verified_and_served_nowhere(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    seal.seal(dest, assets)
    assert "other/loose.bin" in (dest / "SHA256SUMS").read_text()
    assert "other/loose.bin" not in (dest / "bake.serve").read_text()


def test_a_consumer_with_nothing_selected_gets_no_location(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    selected = [a for a in assets if not a.path.startswith(("whisper/", "nltk/"))]
    seal.seal(dest, manifest.Assets(selected, assets.declared))
    serve = (dest / "bake.serve").read_text()
    assert "whisper" not in serve and "nltk" not in serve
    assert "s3tokenizer.0" in serve


def test_verify_with_the_manifest_catches_a_tampered_seal(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    seal.seal(dest, assets)
    files = index.expected_files(assets)
    verify.verify_dest(dest, files, assets=assets)
    serve = dest / "bake.serve"
    serve.chmod(0o644)
    serve.write_text(EXPECTED_SERVE.replace("NLTK_DATA", "PYTHONPATH"))
    with pytest.raises(VerifyError, match=r"bake\.serve: not what `bake seal` writes"):
        verify.verify_dest(dest, files, assets=assets)
    verify.verify_dest(dest, files)  # the lock alone does not know the consumers


def test_tests_image_manifest_serve_records() -> None:
    """The exact records seal writes for the image tests' manifest (sizes from the manifest)."""
    assets = manifest.load_manifest(REPO / "tests/image/assets.toml")
    files = [index.LockedFile(a.path, a.size, a.sha256) for a in assets]
    text = consumers.serve_text(assets.consumers(), files)
    assert text == IMAGE_SERVE


V3, V2 = "speech_tokenizer_v3_25hz.onnx", "speech_tokenizer_v2_25hz.onnx"
O200K, CL100K = VOCAB_NAME, "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
IMAGE_SERVE = (
    "# bake serve v1\n"
    "loc\tnltk.0\tnltk\texport\tNLTK_DATA\t\t\n"
    "loc\ts3tokenizer.0\ts3tokenizer\tunder\tXDG_CACHE_HOME\ts3tokenizer\t$HOME/.cache\n"
    "loc\ttiktoken.0\ttiktoken\texport\tTIKTOKEN_RS_CACHE_DIR\t\t\n"
    "loc\ttiktoken.1\ttiktoken\texport\tTIKTOKEN_CACHE_DIR\t\t\n"
    "file\tnltk.0\tnltk/corpora/stopwords/english\tcorpora/stopwords/english\t23\t\n"
    f"file\ts3tokenizer.0\ts3tokenizer/{V2}\t{V2}\t1048576\t\n"
    f"file\ts3tokenizer.0\ts3tokenizer/{V3}\t{V3}\t8388608\t\n"
    f"file\ttiktoken.0\ttiktoken/{CL100K}\t{CL100K}\t1681126\t\n"
    f"file\ttiktoken.0\ttiktoken/{O200K}\t{O200K}\t3613922\t\n"
    f"file\ttiktoken.1\ttiktoken/{CL100K}\t{CL100K}\t1681126\t\n"
    f"file\ttiktoken.1\ttiktoken/{O200K}\t{O200K}\t3613922\t\n"
)

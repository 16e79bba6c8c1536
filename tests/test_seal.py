"""bake.seal: alias links, bake.serve and read-only modes."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from bake import consumers, index, manifest, seal, verify
from bake.asset import Asset
from bake.errors import UsageError, VerifyError
from bake.manifest import parse_manifest
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
        "bake.offline": 0o444,
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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected_serve(locs: list[str], consumers_: dict[str, tuple[int, str, list[str]]]) -> str:
    """bake.serve as SERVE_FORMAT.md spells it, worked out here on its own: the ``loc`` lines, then
    per consumer a ``set`` line whose DIGEST is the sha256 of its other lines, then those lines by kind."""
    sets, rest = [], []
    for name, (size, shown, lines) in sorted(consumers_.items()):
        digest = hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()
        sets.append(f"set\t{name}\t{digest}\t{size}\t.bake\t{name}\t{shown}")
        rest += lines
    order = ["dir", "place", "skip", "file", "link"]
    rest.sort(key=lambda line: (order.index(line.split("\t")[0]), line.split("\t")[1:]))
    return "# bake serve v1\n" + "".join(line + "\n" for line in [*locs, *sets, *rest])


def tree(name: str, files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> list[str]:
    """The records of a consumer whose location mirrors its asset directory: a few files, each linked."""
    return [
        *(f"dir\t{name}\tboth\t{d}" for d in (".", *dirs)),
        *(f"place\t{name}\tlink\t{name}/{n}\t{n}" for n in files),
        *(f"file\t{name}\tboth\t{n}\t{len(d)}\t{_sha(d)}" for n, d in files.items()),
    ]


EXPECTED_SERVE = expected_serve(
    [
        "loc\tnltk.0\tnltk\texport\tNLTK_DATA\t\t",
        "loc\ts3tokenizer.0\ts3tokenizer\tunder\tXDG_CACHE_HOME\ts3tokenizer\t$HOME/.cache",
        "loc\ttiktoken.0\ttiktoken\texport\tTIKTOKEN_RS_CACHE_DIR\t\t",
        "loc\ttiktoken.1\ttiktoken\texport\tTIKTOKEN_CACHE_DIR\t\t",
        "loc\twhisper.0\twhisper\tunder\tXDG_CACHE_HOME\twhisper\t$HOME/.cache",
        "loc\twhisper.1\twhisper\tunder\tWHISPER_HOME\tmodels\t/opt/whisper",
    ],
    {
        "nltk": (
            6,
            "nltk/corpora",
            tree("nltk", {"corpora/stopwords/english": b"a\nthe\n"}, ("corpora", "corpora/stopwords")),
        ),
        "s3tokenizer": (5, "s3tokenizer/m.onnx", tree("s3tokenizer", {"m.onnx": b"model"})),
        "tiktoken": (
            6,
            "tiktoken/o200k_base",
            tree("tiktoken", {VOCAB_NAME: b"vocab!"}),
        ),
        "whisper": (7, "whisper/base.pt", tree("whisper", {"base.pt": b"weights"})),
    },
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
    seal.seal(dest, manifest.Manifest.of(reversed(assets), assets.declared))  # idempotent, any order
    assert (dest / "bake.serve").read_text() == EXPECTED_SERVE


def test_no_field_of_bake_serve_holds_a_tab_or_newline(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    seal.seal(dest, assets)
    lines = (dest / "bake.serve").read_bytes().split(b"\n")
    assert lines[-1] == b""
    fields = {"loc": 7, "set": 7, "dir": 4, "place": 5, "skip": 3, "file": 6, "link": 4}
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
    seal.seal(dest, manifest.Manifest.of(selected, assets.declared))
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
    assets = IMAGE_ASSETS
    files = [index.LockedFile(a.path, a.size, a.sha256) for a in assets]
    text = consumers.serve_text(assets.consumers(), files, seal.alias_links(assets))
    assert text == IMAGE_SERVE


V3, V2 = "speech_tokenizer_v3_25hz.onnx", "speech_tokenizer_v2_25hz.onnx"
O200K, CL100K = VOCAB_NAME, "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
JPG, OGG = "stop_sign.jpg", "winning_call.ogg"
IMAGE_ASSETS = manifest.load_manifest(REPO / "tests/image/assets.toml")
IMAGE_SHA = {a.path: a.sha256 for a in IMAGE_ASSETS}


def image_files(name: str, sizes: dict[str, int]) -> list[str]:
    return [f"file\t{name}\tboth\t{n}\t{size}\t{IMAGE_SHA[f'{name}/{n}']}" for n, size in sizes.items()]


IMAGE_SERVE = expected_serve(
    [
        "loc\tnltk.0\tnltk\texport\tNLTK_DATA\t\t",
        "loc\ts3tokenizer.0\ts3tokenizer\tunder\tXDG_CACHE_HOME\ts3tokenizer\t$HOME/.cache",
        "loc\ttiktoken.0\ttiktoken\texport\tTIKTOKEN_RS_CACHE_DIR\t\t",
        "loc\ttiktoken.1\ttiktoken\texport\tTIKTOKEN_CACHE_DIR\t\t",
        # vLLM's chain: its XDG fallback first (serving nothing itself), then VLLM_ASSETS_CACHE.
        "loc\tvllm_public_assets.xdg\t-\tunder\tXDG_CACHE_HOME\tvllm/assets\t$HOME/.cache",
        "loc\tvllm_public_assets.0\tvllm_public_assets\tunder\tVLLM_ASSETS_CACHE\tvllm_public_assets"
        "\t@vllm_public_assets.xdg",
    ],
    {
        "nltk": (
            23,
            "nltk/corpora",
            [
                *(f"dir\tnltk\tboth\t{d}" for d in (".", "corpora", "corpora/stopwords")),
                "place\tnltk\tlink\tnltk/corpora/stopwords/english\tcorpora/stopwords/english",
                *image_files("nltk", {"corpora/stopwords/english": 23}),
            ],
        ),
        "s3tokenizer": (
            1048576 + 8388608,
            f"s3tokenizer/{V2}, s3tokenizer/{V3}",
            [
                "dir\ts3tokenizer\tboth\t.",
                f"place\ts3tokenizer\tlink\ts3tokenizer/{V2}\t{V2}",
                f"place\ts3tokenizer\tlink\ts3tokenizer/{V3}\t{V3}",
                *image_files("s3tokenizer", {V2: 1048576, V3: 8388608}),
            ],
        ),
        "tiktoken": (
            1681126 + 3613922,
            "tiktoken/cl100k_base, tiktoken/o200k_base",
            [
                "dir\ttiktoken\tboth\t.",
                f"place\ttiktoken\tlink\ttiktoken/{CL100K}\t{CL100K}",
                f"place\ttiktoken\tlink\ttiktoken/{O200K}\t{O200K}",
                *image_files("tiktoken", {CL100K: 1681126, O200K: 3613922}),
            ],
        ),
        "vllm_public_assets": (
            49152 + 32768,
            f"vllm_public_assets/{JPG}, vllm_public_assets/{OGG}",
            [
                "dir\tvllm_public_assets\tboth\t.",
                f"place\tvllm_public_assets\tlink\tvllm_public_assets/{JPG}\t{JPG}",
                f"place\tvllm_public_assets\tlink\tvllm_public_assets/{OGG}\t{OGG}",
                *image_files("vllm_public_assets", {JPG: 49152, OGG: 32768}),
            ],
        ),
    },
)


def test_verify_names_a_bake_serve_that_is_not_text(served: tuple[Path, list[Asset]]) -> None:
    dest, assets = served
    seal.seal(dest, assets)
    serve = dest / "bake.serve"
    serve.chmod(0o644)
    serve.write_bytes(b"\xff\xfe not UTF-8\n")
    with pytest.raises(VerifyError, match=r"bake\.serve: not what `bake seal` writes"):
        verify.verify_dest(dest, index.expected_files(assets), assets=assets)


HUB_DATA = b"{}\n"
HUB_FOLDER = "hub/models--org--tiny"
HUB_MANIFEST = f"""
[[hub]]
repo = "org/tiny"
commit = "{"a" * 40}"
ref = "main"
files = [{{path = "config.json", size = {len(HUB_DATA)}, sha256 = "{_sha(HUB_DATA)}", blob = "{"c" * 40}"}}]
"""


@pytest.fixture
def hub_dest(tmp_path: Path) -> tuple[Path, list[Asset]]:
    """A fetched destination of one pinned Hub repository whose ref seal writes."""
    dest, assets = tmp_path / "dest", parse_manifest(HUB_MANIFEST)
    for a in assets:
        (dest / a.path).parent.mkdir(parents=True, exist_ok=True)
        (dest / a.path).write_bytes(HUB_DATA)
    index.write_index(dest, assets)
    yield dest, assets
    for p in [dest, *dest.rglob("*")]:  # let pytest clean up
        if not p.is_symlink():
            p.chmod(0o755)


@pytest.mark.parametrize(
    ("planted", "data", "expected"),
    [
        pytest.param(
            "refs/main", b"\xff\xfe", "expected bake's own main, found something else", id="ref-not-text"
        ),
        pytest.param("refs", b"x", "expected bake's own main, could not make it", id="file-at-refs"),
        pytest.param("snapshots", b"x", "expected a link to ../../blobs/", id="file-at-snapshots"),
    ],
)
def test_seal_names_what_is_in_the_way_of_the_hubs_layout(
    hub_dest: tuple[Path, list[Asset]], planted: str, data: bytes, expected: str
) -> None:
    dest, assets = hub_dest
    (dest / HUB_FOLDER / planted).parent.mkdir(parents=True, exist_ok=True)
    (dest / HUB_FOLDER / planted).write_bytes(data)
    with pytest.raises(UsageError, match="reseal") as info:
        seal.seal(dest, assets)
    assert str(dest / HUB_FOLDER) in str(info.value) and expected in str(info.value)


def test_seal_writes_the_index_again_when_sha256sums_is_gone(hub_dest: tuple[Path, list[Asset]]) -> None:
    dest, assets = hub_dest
    (dest / "SHA256SUMS").unlink()
    seal.seal(dest, assets)
    assert f"  {HUB_FOLDER}/refs/main\n" in (dest / "SHA256SUMS").read_text()

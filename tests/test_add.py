"""``bake add``: one fetch through the engine, one appended entry, every other byte of the manifest kept."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bake import add, consumers, manifest
from bake.asset import Asset
from bake.errors import UsageError
from bake.manifest import load_manifest
from tests.assets import VLLM_BUCKET, sha256
from tests.mirror import Mirror, http_error, truncate
from tests.runners import bake
from tests.vllm_site import IMAGE, IMAGE_URL

DATA = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(DATA).hexdigest()
OPENAI = "https://openaipublic.blob.core.windows.net/"
S3_V2_URL = "https://www.modelscope.cn/models/iic/CosyVoice2-0.5B/resolve/master/speech_tokenizer_v2.onnx"
CL100K_URL = OPENAI + "encodings/cl100k_base.tiktoken"

# Comments, odd spacing, literal strings, a multi-line array and a [[consumer]] last:
# `bake add` must keep every byte of it.
ODD = """\
# Assets for the odd team.   Keep   this spacing.
[[asset]]   # the first one
name="first"
path = 'data/first.bin'
sha256 = "%s"
urls = [ "file:///nowhere/first" ,
  # a mirror we used to have
]
groups=[ "a" ]
# a comment that introduces nothing

[[consumer]]
name = "whisper"                                          # owns whisper/
locations = ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]
# trailing comment, no newline at the end""" % ("0" * 64)


@pytest.fixture
def odd_manifest(tmp_path: Path) -> Path:
    path = tmp_path / "assets.toml"
    path.write_text(ODD)
    return path


def run_add(mirror: Mirror, manifest_path: Path, cache: Path, *args: str) -> object:
    return bake(
        "add",
        *args,
        "--manifest",
        str(manifest_path),
        "--cache-dir",
        str(cache),
        "--mirror",
        f"{OPENAI}={mirror.url('/openai/')}",
        "--mirror",
        f"https://www.modelscope.cn/={mirror.url('/modelscope/')}",
        "--timeout",
        "5",
    )


def test_add_appends_only_the_new_entry(mirror: Mirror, odd_manifest: Path, tmp_path: Path) -> None:
    mirror.add("/files/model.bin", DATA)
    url = mirror.url("/files/model.bin")
    result = run_add(
        mirror, odd_manifest, tmp_path / "cache", url, "--path", "whisper/base.pt", "--group", "g"
    )
    assert result.returncode == 0, result.stderr
    text = odd_manifest.read_text()
    assert text.startswith(ODD)
    assert text[len(ODD) :] == (
        "\n\n[[asset]]\n"
        'name = "base"\n'
        'path = "whisper/base.pt"\n'
        f'sha256 = "{SHA}"\n'
        f"size = {len(DATA)}\n"
        f'urls = ["{url}"]\n'
        'groups = ["g"]\n'
    )
    assert manifest.load_manifest(odd_manifest)[-1].size == len(DATA)


def test_a_host_side_fetch_after_add_is_a_cache_hit(
    mirror: Mirror, odd_manifest: Path, tmp_path: Path
) -> None:
    mirror.add("/files/model.bin", DATA)
    cache = tmp_path / "cache"
    url = mirror.url("/files/model.bin")
    assert (
        run_add(mirror, odd_manifest, cache, url, "--path", "whisper/base.pt", "--group", "g").returncode == 0
    )
    assert mirror.bytes_sent["/files/model.bin"] == len(DATA)
    report = tmp_path / "report.json"
    fetched = bake(
        "fetch", "--manifest", str(odd_manifest), "--dest", str(tmp_path / "dest"), "--cache-dir", str(cache),
        "--json", str(report), "--group", "g",
    )  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    records = {r["name"]: r for r in json.loads(report.read_text())["assets"]}
    assert records["base"]["cached"] is True
    # The loopback mirror served the bytes once, to `bake add`.
    assert mirror.bytes_sent["/files/model.bin"] == len(DATA)
    assert (tmp_path / "dest/whisper/base.pt").read_bytes() == DATA
    # The URL-keyed download is gone: only the object named by its sha256 stays.
    assert sorted(p.name for p in (cache / "objects").iterdir()) == [SHA]


def test_an_interrupted_add_resumes_from_the_partial_keyed_by_its_url(
    mirror: Mirror, odd_manifest: Path, tmp_path: Path
) -> None:
    mirror.add("/files/model.bin", DATA)
    url = mirror.url("/files/model.bin")
    cache = tmp_path / "cache"
    mirror.script("/files/model.bin", truncate(len(DATA) // 2), http_error(404))
    args = (url, "--path", "whisper/base.pt", "--connections", "1")
    first = run_add(mirror, odd_manifest, cache, *args)
    assert first.returncode == 3, first.stderr
    assert odd_manifest.read_text() == ODD
    assert (cache / "partial" / hashlib.sha256(url.encode()).hexdigest()).stat().st_size > 0
    sent = mirror.bytes_sent["/files/model.bin"]
    assert run_add(mirror, odd_manifest, cache, *args).returncode == 0
    assert mirror.bytes_sent["/files/model.bin"] - sent <= len(DATA) - len(DATA) // 2 + 65536


def test_tiktoken_url_gets_its_sha1_path(mirror: Mirror, odd_manifest: Path, tmp_path: Path) -> None:
    url = OPENAI + "encodings/test_base.tiktoken"
    mirror.add("/openai/encodings/test_base.tiktoken", DATA)
    result = run_add(mirror, odd_manifest, tmp_path / "cache", url)
    assert result.returncode == 0, result.stderr
    asset = manifest.load_manifest(odd_manifest)[-1]
    assert (asset.name, asset.path) == ("test_base", "tiktoken/" + hashlib.sha1(url.encode()).hexdigest())
    assert asset.urls == (url,)


def test_s3tokenizer_url_gets_the_model_name_from_its_table() -> None:
    assert add.derive_path(S3_V2_URL, consumers.BUILTINS) == "s3tokenizer/speech_tokenizer_v2_25hz.onnx"
    assert (
        add.derive_name(S3_V2_URL, "s3tokenizer/speech_tokenizer_v2_25hz.onnx") == "speech_tokenizer_v2_25hz"
    )


@pytest.mark.parametrize(
    ("url", "served"),
    [
        pytest.param(S3_V2_URL, "/modelscope/" + S3_V2_URL.split("modelscope.cn/")[1], id="s3tokenizer"),
        pytest.param(CL100K_URL, "/openai/encodings/cl100k_base.tiktoken", id="tiktoken"),
    ],
)
def test_bytes_the_consumer_table_disagrees_with_exit_3(
    mirror: Mirror, odd_manifest: Path, tmp_path: Path, url: str, served: str
) -> None:
    mirror.add(served, DATA)
    result = run_add(mirror, odd_manifest, tmp_path / "cache", url)
    assert result.returncode == 3, result.stderr
    assert f"fetched sha256 {SHA}" in result.stderr
    assert odd_manifest.read_text() == ODD


def test_no_naming_rule_asks_for_path(mirror: Mirror, odd_manifest: Path, tmp_path: Path) -> None:
    mirror.add("/files/model.bin", DATA)
    result = run_add(mirror, odd_manifest, tmp_path / "cache", mirror.url("/files/model.bin"))
    assert result.returncode == 2
    assert "--path" in result.stderr
    assert odd_manifest.read_text() == ODD
    assert mirror.requests["/files/model.bin"] == 0


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("--name", "first", "--path", "data/other.bin"), id="name"),
        pytest.param(("--path", "data/first.bin"), id="path"),
        pytest.param(("--path", "data/first.bin/x"), id="under-a-file"),
        pytest.param(("--path", "tiktoken/abc"), id="breaks-a-naming-rule"),
    ],
)
def test_duplicate_or_bad_entry_is_exit_2_before_any_fetch(
    mirror: Mirror, odd_manifest: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    mirror.add("/files/model.bin", DATA)
    result = run_add(mirror, odd_manifest, tmp_path / "cache", mirror.url("/files/model.bin"), *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert odd_manifest.read_text() == ODD
    assert mirror.requests["/files/model.bin"] == 0


@pytest.mark.parametrize(("sha", "code"), [(SHA, 0), ("b" * 64, 3)])
def test_sha256_option_must_match(
    mirror: Mirror, odd_manifest: Path, tmp_path: Path, sha: str, code: int
) -> None:
    mirror.add("/files/model.bin", DATA)
    url = mirror.url("/files/model.bin")
    result = run_add(mirror, odd_manifest, tmp_path / "cache", url, "--path", "data/m.bin", "--sha256", sha)
    assert result.returncode == code, result.stderr
    # One download either way; a wrong --sha256 is named as the thing to check, not the manifest (issue 17).
    assert mirror.bytes_sent["/files/model.bin"] == len(DATA)
    if code:
        assert odd_manifest.read_text() == ODD
        assert f"not to the --sha256 {sha}" in result.stderr and "manifest hash" not in result.stderr
    else:
        assert manifest.load_manifest(odd_manifest)[-1].sha256 == SHA


SIZELESS = """\
# Production checkpoint: its size was never known.
[[asset]]
name = "ckpt"
path = "data/ckpt.onnx"   # odd spacing kept
sha256 = "%s"
urls = ["%s"]
groups = ["omni"]

[[asset]]
name = "other"
path = "data/other"
sha256 = "%s"
size = 3
urls = ["file:///other"]
"""


@pytest.mark.parametrize(("served", "code"), [(DATA, 0), (DATA[:-1] + b"x", 3)])
def test_size_only_fills_in_a_missing_size(mirror: Mirror, tmp_path: Path, served: bytes, code: int) -> None:
    mirror.add("/files/ckpt.onnx", served)
    path = tmp_path / "assets.toml"
    before = SIZELESS % (SHA, mirror.url("/files/ckpt.onnx"), "1" * 64)
    path.write_text(before)
    result = run_add(mirror, path, tmp_path / "cache", "--size-only", "ckpt")
    assert result.returncode == code, result.stderr
    if code:
        assert path.read_text() == before
        return
    marker = f'sha256 = "{SHA}"\n'
    assert path.read_text() == before.replace(marker, marker + f"size = {len(DATA)}\n")


def test_size_only_of_an_unknown_name_is_exit_2(mirror: Mirror, odd_manifest: Path, tmp_path: Path) -> None:
    result = run_add(mirror, odd_manifest, tmp_path / "cache", "--size-only", "nope")
    assert result.returncode == 2
    assert "known names: first" in result.stderr


def test_render_entry_is_what_the_manifest_reads_back() -> None:
    asset = Asset("n", "data/n", SHA, ("https://x.org/n",), 5, ("g",))
    (parsed,) = manifest.parse_manifest(add.render_entry(asset))
    assert parsed == asset


def test_derive_name_refuses_a_nameless_url() -> None:
    with pytest.raises(UsageError, match="--name"):
        add.derive_name("https://x.org/", "data/0123456789abcdef0123456789abcdef01234567")


EMBEDS = b"llava image embeddings\n" * 64


def test_add_writes_the_path_vllm_reads_with_no_path_option(mirror: Mirror, tmp_path: Path) -> None:
    mirror.add("/bucket/vision_model_images/stop_sign.jpg", IMAGE)
    mirror.add("/bucket/vision_model_images/stop_sign.pt", EMBEDS)
    manifest = tmp_path / "assets.toml"
    for suffix in ("jpg", "pt"):
        result = bake(
            "add", f"{VLLM_BUCKET}vision_model_images/stop_sign.{suffix}", "--group", "vllm",
            "--manifest", manifest, "--cache-dir", tmp_path / "cache",
            "--mirror", f"{VLLM_BUCKET}={mirror.url('/bucket/')}", "--no-origin", "--timeout", "5",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    assets = load_manifest(manifest)
    assert [(a.name, a.path, a.sha256, a.urls) for a in assets] == [
        ("stop_sign.jpg", "vllm_public_assets/stop_sign.jpg", sha256(IMAGE), (IMAGE_URL,)),
        (
            "stop_sign.pt",
            "vllm_public_assets/stop_sign.pt",
            sha256(EMBEDS),
            (f"{VLLM_BUCKET}vision_model_images/stop_sign.pt",),
        ),
    ]

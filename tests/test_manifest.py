"""Manifest parsing, validation, selection and digest."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from bake import manifest
from bake.errors import ManifestError

REPO = Path(__file__).resolve().parents[1]
VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
VOCAB_PATH = "tiktoken/" + hashlib.sha1(VOCAB_URL.encode()).hexdigest()
SHA = "a" * 64


def entry(**overrides: object) -> str:
    """Return one [[asset]] table in TOML, with overrides (None drops a key)."""
    fields = {
        "name": "blob",
        "path": "data/blob.bin",
        "sha256": SHA,
        "urls": ["https://example.org/blob.bin"],
    }
    fields.update(overrides)
    lines = ["[[asset]]"]
    for key, value in fields.items():
        if value is None:
            continue
        lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def toml_value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return str(value)


def test_production_manifest_holds_the_brief_assets() -> None:
    assets = {a.name: a for a in manifest.load_manifest(REPO / "docker/assets.toml")}
    s3 = assets["speech_tokenizer_v3_25hz"]
    assert s3.path == "s3tokenizer/speech_tokenizer_v3_25hz.onnx"
    assert s3.sha256 == "23236a74175dbdda47afc66dbadd5bcb41303c467a57c261cb8539ad9db9208d"
    assert s3.urls[0].endswith("/Fun-CosyVoice3-0.5B-2512/resolve/master/speech_tokenizer_v3.onnx")
    vocab = assets["o200k_base"]
    assert vocab.path == "tiktoken/fb374d419588a4632f3f557e76b4b70aebbca790"
    assert vocab.sha256 == "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    assert vocab.size == 3_613_922
    assert vocab.canonical_url() == VOCAB_URL


def test_valid_entry_round_trips() -> None:
    text = entry(size=12, groups=["vllm", "omni"], urls=["file:///srv/blob.bin", "https://example.org/b"])
    (asset,) = manifest.parse_manifest(text)
    assert asset == manifest.Asset(
        name="blob",
        path="data/blob.bin",
        sha256=SHA,
        urls=("file:///srv/blob.bin", "https://example.org/b"),
        size=12,
        groups=("vllm", "omni"),
    )


def test_uppercase_sha_is_normalised() -> None:
    (asset,) = manifest.parse_manifest(entry(sha256="A" * 64))
    assert asset.sha256 == SHA


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param(entry(sha256=None), "missing required key(s) sha256", id="sha-missing"),
        pytest.param(entry(sha256="abc"), "64 hex characters", id="sha-short"),
        pytest.param(entry(sha256="g" * 64), "64 hex characters", id="sha-non-hex"),
        pytest.param(entry(urls=[]), "non-empty list", id="urls-empty"),
        pytest.param(entry(urls="https://example.org/x"), "non-empty list", id="urls-not-list"),
        pytest.param(entry(urls=["ftp://example.org/x"]), "scheme 'ftp'", id="scheme-unknown"),
        pytest.param(entry(urls=["http://example.org/x"]), "--allow-http", id="http-non-loopback"),
        pytest.param(entry(urls=["hf://org/repo"]), "hf://ORG/REPO", id="hf-too-short"),
        pytest.param(entry(path="../etc/passwd"), "no '..'", id="path-dotdot"),
        pytest.param(entry(path="a/../../b"), "no '..'", id="path-inner-dotdot"),
        pytest.param(entry(path="/etc/passwd"), "absolute", id="path-absolute"),
        pytest.param(entry(path="a//b"), "normalised", id="path-not-normal"),
        pytest.param(entry(path="SHA256SUMS"), "reserved", id="path-reserved"),
        pytest.param(entry(colour="red"), "unknown key(s) colour", id="unknown-key"),
        pytest.param(entry(size=-1), "non-negative", id="size-negative"),
        pytest.param(entry(groups="vllm"), "groups must be a list", id="groups-not-list"),
        pytest.param(entry(name="bad name"), "name 'bad name'", id="name-invalid"),
        pytest.param(entry() + entry(path="other"), "duplicate name 'blob'", id="duplicate-name"),
        pytest.param(entry() + entry(name="b2"), "duplicate path 'data/blob.bin'", id="duplicate-path"),
        pytest.param(entry() + entry(name="b2", path="data/blob.bin/x"), "lies under", id="path-under-file"),
        pytest.param(
            entry(path="tiktoken/" + "0" * 40, urls=[VOCAB_URL]), "not the SHA-1", id="tiktoken-sha1"
        ),
        pytest.param(entry(path=VOCAB_PATH, urls=["file:///v"]), "needs an https://", id="tiktoken-no-https"),
        pytest.param(entry(path="s3tokenizer/model.bin"), "s3tokenizer/<model>.onnx", id="s3-not-onnx"),
        pytest.param(entry(path="s3tokenizer/a/b.onnx"), "s3tokenizer/<model>.onnx", id="s3-nested"),
        pytest.param("", "no [[asset]] tables", id="empty"),
        pytest.param("[asset]\nname = 1\n", "not [asset]", id="asset-not-array"),
        pytest.param("colour = 1\n" + entry(), "unknown top-level", id="top-level-key"),
    ],
)
def test_bad_manifest_is_refused_naming_the_asset(text: str, needle: str) -> None:
    with pytest.raises(ManifestError) as err:
        manifest.parse_manifest(text)
    assert needle in str(err.value)
    assert err.value.exit_code == 2


def test_malformed_toml_names_the_line() -> None:
    with pytest.raises(ManifestError, match=r"line 3"):
        manifest.parse_manifest('[[asset]]\nname = "a"\npath = = "x"\n', source="m.toml")


def test_error_names_the_asset() -> None:
    with pytest.raises(ManifestError, match=r"asset 'blob': sha256"):
        manifest.parse_manifest(entry(sha256="123"))


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/x", "http://localhost/x", "http://[::1]:80/x", "http://127.1.2.3/x"]
)
def test_loopback_http_is_allowed(url: str) -> None:
    (asset,) = manifest.parse_manifest(entry(urls=[url]))
    assert asset.urls == (url,)


def test_allow_http_admits_any_host() -> None:
    (asset,) = manifest.parse_manifest(entry(urls=["http://mirror.lan/x"]), allow_http=True)
    assert asset.urls == ("http://mirror.lan/x",)


def test_tiktoken_path_must_be_sha1_of_canonical_url() -> None:
    (asset,) = manifest.parse_manifest(entry(path=VOCAB_PATH, urls=["file:///local/copy", VOCAB_URL]))
    assert asset.canonical_url() == VOCAB_URL


GROUPED = (
    entry(name="shared", path="shared")
    + entry(name="vocab", path="vocab", groups=["vllm", "omni"])
    + entry(name="ckpt", path="ckpt", groups=["omni"])
)


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        pytest.param([], ["shared", "vocab", "ckpt"], id="no-group-selects-all"),
        pytest.param(["vllm"], ["shared", "vocab"], id="vllm"),
        pytest.param(["omni"], ["shared", "vocab", "ckpt"], id="omni"),
        pytest.param(["vllm", "omni"], ["shared", "vocab", "ckpt"], id="both"),
    ],
)
def test_select_by_group(groups: list[str], expected: list[str]) -> None:
    selected = manifest.select(manifest.parse_manifest(GROUPED), groups)
    assert [a.name for a in selected] == expected


def test_select_unknown_group_is_an_error() -> None:
    with pytest.raises(ManifestError, match="'cuda' are named by no asset"):
        manifest.select(manifest.parse_manifest(GROUPED), ["cuda"])


def test_digest_is_canonical_json_of_path_size_sha() -> None:
    assets = manifest.parse_manifest(entry(size=5) + entry(name="b", path="a-first"))
    canonical = (
        '[{"path":"a-first","sha256":"' + SHA + '","size":null},'
        '{"path":"data/blob.bin","sha256":"' + SHA + '","size":5}]'
    )
    assert manifest.manifest_digest(assets) == hashlib.sha256(canonical.encode()).hexdigest()


def test_digest_ignores_urls_and_order() -> None:
    one = manifest.parse_manifest(entry() + entry(name="b", path="b"))
    two = manifest.parse_manifest(entry(name="b", path="b", urls=["file:///x"]) + entry())
    assert manifest.manifest_digest(one) == manifest.manifest_digest(two)


def test_unreadable_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read it"):
        manifest.load_manifest(tmp_path / "missing.toml")


def test_python_310_reads_manifests_with_the_vendored_tomli(monkeypatch: pytest.MonkeyPatch) -> None:
    # Python 3.10 has no tomllib, and a FETCH_IMAGE has no pip: bake carries tomli itself.
    monkeypatch.setitem(sys.modules, "tomllib", None)
    (asset,) = manifest.parse_manifest(entry(size=3))
    assert asset.size == 3
    with pytest.raises(ManifestError, match="not valid TOML"):
        manifest.parse_manifest("[[asset]\n")

"""Where to get an asset: mirror specs (never showing their passwords; redaction: test_urls.py), candidate
URLs in order, the origin as fallback or never, and hf:// resolved through HF_ENDPOINT."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bake.errors import ManifestError, UsageError
from bake.fetch import FetchFailed
from bake.fetch.sources import candidate_urls, parse_mirrors
from tests.fetch.conftest import KIB, MIB, blob, fetch_one, make_asset, opts
from tests.mirror import Mirror


@pytest.mark.parametrize(
    "spec",
    [
        "https://user:secret@mirror.internal/",  # no PREFIX=
        "https://a/=ftp://user:secret@mirror.internal/",  # a scheme bake does not fetch
        "https://a/=https://user:secret@[bad/",  # not a URL
    ],
)
def test_a_bad_mirror_spec_never_shows_its_password(spec: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_mirrors([spec])
    assert "secret" not in str(info.value) and "***" in str(info.value)


def test_mirror_rewrite_is_tried_before_the_origin(mirror: Mirror, mirror2: Mirror, tmp_path: Path) -> None:
    data = blob(20 * KIB)
    mirror.add("/origin/f.bin", data)
    mirror2.add("/copy/f.bin", data)
    options = {"mirrors": parse_mirrors([f"{mirror.url('/origin/')}={mirror2.url('/copy/')}"])}
    record = fetch_one(make_asset(data, mirror.url("/origin/f.bin")), tmp_path, **options)
    assert record.source == mirror2.url("/copy/f.bin")
    assert mirror.requests["/origin/f.bin"] == 0


def test_origin_is_the_fallback_when_the_mirror_fails(
    mirror: Mirror, mirror2: Mirror, tmp_path: Path
) -> None:
    data = blob(20 * KIB)
    mirror.add("/origin/f.bin", data)
    options = {"mirrors": parse_mirrors([f"{mirror.url('/origin/')}={mirror2.url('/copy/')}"])}
    record = fetch_one(make_asset(data, mirror.url("/origin/f.bin")), tmp_path, **options)
    assert record.source == mirror.url("/origin/f.bin")
    assert mirror2.requests["/copy/f.bin"] == 1


def test_no_origin_never_touches_the_origin(mirror: Mirror, mirror2: Mirror, tmp_path: Path) -> None:
    data = blob(20 * KIB)
    mirror.add("/origin/f.bin", data)
    options = {
        "mirrors": parse_mirrors([f"{mirror.url('/origin/')}={mirror2.url('/copy/')}"]),
        "no_origin": True,
    }
    with pytest.raises(FetchFailed, match="HTTP 404"):
        fetch_one(make_asset(data, mirror.url("/origin/f.bin")), tmp_path, **options)
    assert sum(mirror.requests.values()) == 0
    assert mirror2.requests["/copy/f.bin"] == 1


@pytest.mark.parametrize("token_from", ["HF_TOKEN", "HF_TOKEN_FILE"])
def test_hf_source_resolves_through_hf_endpoint(
    mirror: Mirror, mirror2: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token_from: str
) -> None:
    pytest.importorskip("huggingface_hub")
    data = blob(3 * MIB)
    blob_path = mirror.add_hub_file(
        "FunAudioLLM/Fun-CosyVoice3-0.5B-2512", "main", "onnx/tok.onnx", data, cdn=mirror2, token="hf_secret"
    )
    monkeypatch.setenv("HF_ENDPOINT", mirror.base_url)
    if token_from == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
    else:
        (tmp_path / "token").write_text("hf_secret\n")
        monkeypatch.setenv("HF_TOKEN_FILE", str(tmp_path / "token"))
    url = "hf://FunAudioLLM/Fun-CosyVoice3-0.5B-2512@main/onnx/tok.onnx"
    record = fetch_one(make_asset(data, url), tmp_path)
    assert record.source == url
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert {e["authorization"] for e in mirror.log} == {"Bearer hf_secret"}
    assert mirror2.bytes_sent[blob_path] == len(data)
    assert {e["authorization"] for e in mirror2.log} == {None}  # the token never reaches the CDN


def test_hf_source_without_huggingface_hub_says_how_to_install(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(FetchFailed, match="pip install huggingface_hub"):
        fetch_one(make_asset(b"x", "hf://org/repo/file.bin"), tmp_path)


@pytest.mark.parametrize(
    ("mirrors", "no_origin", "expected"),
    [
        pytest.param((), False, ["https://a.example/x/f", "https://b.example/f"], id="no-mirrors"),
        pytest.param(
            (("https://a.example/", "file:///srv/a/"),),
            False,
            ["file:///srv/a/x/f", "https://a.example/x/f", "https://b.example/f"],
            id="rewrite-first",
        ),
        pytest.param(
            (("https://a.example/", "file:///srv/a/"),), True, ["file:///srv/a/x/f"], id="no-origin"
        ),
        pytest.param(
            (("https://", "http://127.0.0.1:8/"),),
            False,
            [
                "http://127.0.0.1:8/a.example/x/f",
                "http://127.0.0.1:8/b.example/f",
                "https://a.example/x/f",
                "https://b.example/f",
            ],
            id="every-rewrite-before-origins",
        ),
    ],
)
def test_candidate_urls(tmp_path: Path, mirrors: tuple, no_origin: bool, expected: list[str]) -> None:
    asset = make_asset(b"x", "https://a.example/x/f", "https://b.example/f")
    assert candidate_urls(asset, opts(tmp_path, mirrors=mirrors, no_origin=no_origin)) == expected


def test_no_origin_without_a_matching_mirror_is_a_usage_error(tmp_path: Path) -> None:
    asset = make_asset(b"x", "https://a.example/f")
    with pytest.raises(UsageError, match="no mirror prefix matches"):
        candidate_urls(asset, opts(tmp_path, mirrors=(("https://other/", "file:///m/"),), no_origin=True))


@pytest.mark.parametrize("allow_http", [False, True])
def test_mirror_to_plain_http_needs_allow_http(tmp_path: Path, allow_http: bool) -> None:
    asset = make_asset(b"x", "https://a.example/f")
    options = opts(
        tmp_path, mirrors=(("https://a.example/", "http://mirror.example/"),), allow_http=allow_http
    )
    if allow_http:
        assert candidate_urls(asset, options)[0] == "http://mirror.example/f"
    else:
        with pytest.raises(ManifestError, match="allow-http"):
            candidate_urls(asset, options)


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        pytest.param(["https://a/=https://m/a/"], (("https://a/", "https://m/a/"),), id="one"),
        pytest.param(
            ["https://a/=file:///m/ https://b/=http://127.0.0.1:9/b/"],
            (("https://a/", "file:///m/"), ("https://b/", "http://127.0.0.1:9/b/")),
            id="env-style",
        ),
        pytest.param(["", "  "], (), id="empty"),
        pytest.param(
            ["https://a/=https://m/?k=v"], (("https://a/", "https://m/?k=v"),), id="first-equals-splits"
        ),
    ],
)
def test_parse_mirrors(specs: list[str], expected: tuple) -> None:
    assert parse_mirrors(specs) == expected


@pytest.mark.parametrize("spec", ["no-equals", "=https://m/", "https://a/=", "https://a/=ftp://m/"])
def test_parse_mirrors_rejects(spec: str) -> None:
    with pytest.raises(UsageError, match="mirror"):
        parse_mirrors([spec])

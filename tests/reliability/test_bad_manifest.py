"""Bad manifests and arguments through the real CLI: exit 2 naming the asset or line, nothing fetched or made.

Each manifest lists a valid asset first, served by a live loopback mirror, so a validator that let
the bad entry through, or validated lazily, would show as traffic or as files under --dest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import bake, blob, files_under, sha256

GOOD = blob(10_000, "good")
HEX = sha256(b"bad")
VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def table(**keys: object) -> str:
    return "[[asset]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


def bad(**overrides: object) -> str:
    """The second asset, ``bad``: valid except for ``overrides`` (a value of None drops that key)."""
    keys = {"name": "bad", "path": "b/bad.bin", "sha256": HEX, "urls": ["https://example.invalid/bad.bin"]}
    keys.update(overrides)
    return table(**{k: v for k, v in keys.items() if v is not None})


# id -> (the text after the good asset, what stderr must name)
CASES: dict[str, tuple[str, str]] = {
    "sha256-missing": (bad(sha256=None), "'bad'"),
    "sha256-short": (bad(sha256=HEX[:63]), "'bad'"),
    "sha256-long": (bad(sha256=HEX + "0"), "'bad'"),
    "sha256-non-hex": (bad(sha256="g" * 64), "'bad'"),
    "sha256-empty": (bad(sha256=""), "'bad'"),
    "sha256-a-number": (bad(sha256=12345), "'bad'"),
    # sha256:HEX is accepted since round 5 (tests/reliability/test_manifest_hostile.py); other prefixes, or a
    # prefix before a short digest, are not.
    "sha256-with-another-prefix": (bad(sha256="sha512:" + HEX), "'bad'"),
    "sha256-prefix-short-hex": (bad(sha256="sha256:" + HEX[:63]), "'bad'"),
    "sha256-trailing-newline": (bad(sha256=HEX + "\n"), "'bad'"),
    "name-missing": (bad(name=None), "asset #2"),
    "name-not-a-word": (bad(name="two words"), "'two words'"),
    "name-duplicate": (bad(name="good"), "duplicate name 'good'"),
    "path-duplicate": (bad(path="a/good.bin"), "duplicate path 'a/good.bin'"),
    "path-dotdot-first": (bad(path="../escape.bin"), "'bad'"),
    "path-dotdot-inside": (bad(path="b/../../escape.bin"), "'bad'"),
    "path-dotdot-harmless-looking": (bad(path="b/../bad.bin"), "'bad'"),
    "path-absolute": (bad(path="/etc/cron.d/bake"), "'bad'"),
    "path-backslash": (bad(path="b\\..\\..\\escape.bin"), "'bad'"),
    "path-not-normalised": (bad(path="./b/bad.bin"), "'bad'"),
    "path-trailing-slash": (bad(path="b/"), "'bad'"),
    "path-empty": (bad(path=""), "'bad'"),
    "path-nul": (bad(path="b/bad\x00.bin"), "'bad'"),
    "path-reserved-index": (bad(path="SHA256SUMS"), "'bad'"),
    "path-under-another-asset": (bad(path="a/good.bin/inner.bin"), "'bad'"),
    "url-ftp": (bad(urls=["ftp://example.invalid/bad.bin"]), "'bad'"),
    "url-s3": (bad(urls=["s3://bucket/bad.bin"]), "'bad'"),
    "url-no-scheme": (bad(urls=["example.invalid/bad.bin"]), "'bad'"),
    "url-https-without-host": (bad(urls=["https:///bad.bin"]), "'bad'"),
    "url-hf-without-file": (bad(urls=["hf://org/repo"]), "'bad'"),
    "urls-empty": (bad(urls=[]), "'bad'"),
    "urls-a-string": (bad(urls="https://example.invalid/bad.bin"), "'bad'"),
    "urls-empty-string": (bad(urls=[""]), "'bad'"),
    "urls-missing": (bad(urls=None), "'bad'"),
    "http-public-host": (bad(urls=["http://example.com/bad.bin"]), "'bad'"),
    "http-loopback-lookalike-name": (bad(urls=["http://localhost.example.com/bad.bin"]), "'bad'"),
    "http-loopback-in-dns-name": (bad(urls=["http://127.0.0.1.nip.io/bad.bin"]), "'bad'"),
    "http-hex-ip": (bad(urls=["http://0x7f000001/bad.bin"]), "'bad'"),
    "http-after-a-good-https": (bad(urls=["https://example.invalid/b", "http://example.com/b"]), "'bad'"),
    "unknown-key": (bad(sha1="0" * 40), "'bad'"),
    "unknown-key-typo-url": (bad(url=["https://example.invalid/bad.bin"]), "'bad'"),
    "size-negative": (bad(size=-1), "'bad'"),
    "size-a-string": (bad(size="10"), "'bad'"),
    "size-a-bool": (bad(size=True), "'bad'"),
    "groups-a-string": (bad(groups="omni"), "'bad'"),
    "groups-empty-name": (bad(groups=[""]), "'bad'"),
    "tiktoken-path-not-sha1-of-url": (bad(path="tiktoken/o200k_base", urls=[VOCAB_URL]), "'bad'"),
    "tiktoken-path-sha1-of-another-url": (
        bad(path="tiktoken/" + hashlib.sha1(b"https://example.invalid/x").hexdigest(), urls=[VOCAB_URL]),
        "'bad'",
    ),
    "tiktoken-without-https-url": (bad(path="tiktoken/x", urls=["file:///tmp/vocab"]), "'bad'"),
    "s3tokenizer-not-onnx": (bad(path="s3tokenizer/model.bin"), "'bad'"),
    "s3tokenizer-nested": (bad(path="s3tokenizer/v3/model.onnx"), "'bad'"),
    "unknown-top-level-table": ("[settings]\nretries = 3\n", "settings"),
    # The good asset takes lines 1-5 and a blank line 6: the tail starts at line 7.
    "toml-table-redeclared": ("[asset]\nname = 'x'\n", "line 7"),
    "toml-unterminated-string": ('[[asset]]\nname = "bad\n', "line 8"),
    "toml-missing-equals": ('[[asset]]\nname "bad"\n', "line 8"),
    "toml-key-twice": ('[[asset]]\nname = "bad"\nname = "worse"\n', "line 9"),
    "toml-bad-array": ('[[asset]]\nurls = ["a" "b"]\n', "line 8"),
}


# URLs that urllib cannot take apart: refused while the manifest is read.
MALFORMED_URLS = [
    pytest.param(
        bad(urls=["http://[::1/bad.bin"]),
        "'bad'",
        id="url-broken-ipv6-literal",
    ),
    pytest.param(
        bad(urls=["http://127.0.0.1:99999/bad.bin"]),
        "'bad'",
        id="url-port-out-of-range",
    ),
]


@pytest.fixture(scope="module")
def good_mirror() -> Iterator[Mirror]:
    with Mirror({"/good.bin": GOOD}) as m:
        yield m


def manifest_with(mirror: Mirror, tail: str) -> str:
    good = table(name="good", path="a/good.bin", sha256=sha256(GOOD), urls=[mirror.url("/good.bin")])
    return good + "\n" + tail


@pytest.fixture(params=["absent", "populated"])
def dest(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """--dest: missing (it must stay missing), or holding an earlier file (it must stay as it was)."""
    d = tmp_path / "dest"
    if request.param == "populated":
        (d / "old").mkdir(parents=True)
        (d / "old/kept.bin").write_bytes(b"an earlier verified file")
    return d


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {rel: ((root / rel).read_bytes(), (root / rel).stat().st_mtime_ns) for rel in files_under(root)}


@pytest.mark.parametrize(
    ("tail", "named"), [pytest.param(*case, id=name) for name, case in CASES.items()] + MALFORMED_URLS
)
def test_bad_manifest_exits_2_naming_it_and_touches_nothing(
    good_mirror: Mirror, tmp_path: Path, dest: Path, tail: str, named: str
) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_with(good_mirror, tail))
    before = snapshot(dest)
    existed = dest.exists()
    requests = sum(good_mirror.requests.values())
    proc = bake("fetch", "--manifest", manifest, "--dest", dest, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr, proc.stderr
    assert proc.stderr.startswith("bake: error:") and "Traceback" not in proc.stderr
    assert sum(good_mirror.requests.values()) == requests  # nothing downloaded
    assert dest.exists() == existed and snapshot(dest) == before
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("content", "named"),
    [
        pytest.param(None, "cannot read it", id="missing-file"),
        pytest.param(b"", "no [[asset]] tables", id="empty-file"),
        pytest.param(b'[[asset]]\nname = "caf\xe9"\n', "not UTF-8", id="not-utf8"),
        pytest.param(b"[asset]\nname = 'x'\n", "[[asset]]", id="asset-a-table-not-an-array"),
    ],
)
def test_unreadable_manifest_exits_2_naming_the_file(
    tmp_path: Path, content: bytes | None, named: str
) -> None:
    manifest = tmp_path / "assets.toml"
    if content is not None:
        manifest.write_bytes(content)
    proc = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "dest")
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr and str(manifest) in proc.stderr
    assert not (tmp_path / "dest").exists()


ARGUMENTS = {
    "timeout-zero": ["--timeout", "0"],
    "timeout-not-a-number": ["--timeout", "soon"],
    "deadline-negative": ["--deadline", "-1"],
    "connections-zero": ["--connections", "0"],
    "attempts-zero": ["--attempts", "0"],
    "jobs-zero": ["--jobs", "0"],
    "mirror-without-equals": ["--mirror", "https://a.invalid/"],
    "mirror-to-ftp": ["--mirror", "http://127.0.0.1/=ftp://m.invalid/"],
    "mirror-port-out-of-range": ["--mirror", "http://127.0.0.1/=http://127.0.0.1:99999/"],
    "mirror-broken-ipv6-literal": ["--mirror", "http://127.0.0.1/=http://[::1/"],
    "no-origin-without-mirror": ["--no-origin"],
    "group-nobody-has": ["--group", "nobody"],
    "unknown-option": ["--retries", "3"],
}


@pytest.mark.parametrize("args", list(ARGUMENTS.values()), ids=list(ARGUMENTS))
def test_bad_arguments_exit_2_before_any_transfer(
    good_mirror: Mirror, tmp_path: Path, args: list[str]
) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_with(good_mirror, ""))
    requests = sum(good_mirror.requests.values())
    proc = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "dest", *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("bake: error:") and "Traceback" not in proc.stderr
    assert sum(good_mirror.requests.values()) == requests
    assert not (tmp_path / "dest").exists()

"""Manifest parsing, validation, selection and digest."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bake import manifest
from bake.asset import Asset
from bake.errors import ManifestError
from tests.runners import bake

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
    assert asset == Asset(
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
        pytest.param(entry(grops=["vllm"]), "grops (did you mean groups?)", id="misspelt-key"),
        pytest.param(entry(sha265=SHA, sha256=None), "sha265 (did you mean sha256?)", id="misspelt-sha256"),
        pytest.param(
            entry().replace("[[asset]]", "[[assets]]"), "assets (did you mean asset?)", id="misspelt-table"
        ),
        pytest.param(
            '[[consumer]]\nname = "w"\nlocation = ["$W"]\n' + entry(),
            "location (did you mean locations?)",
            id="misspelt-consumer-key",
        ),
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


# -- [[consumer]] tables and the location grammar ---------------------------------------------------------


def consumer(name: str = "whisper", *locations: str, **extra: object) -> str:
    """Return one [[consumer]] table in TOML."""
    locs = list(locations) or ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]
    lines = ["[[consumer]]", f"name = {toml_value(name)}", f"locations = {toml_value(locs)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def test_pinned_digests_of_the_repository_manifests() -> None:
    # Manifests without [[consumer]] keep the digest they always had.
    production = manifest.load_manifest(REPO / "docker/assets.toml")
    assert manifest.manifest_digest(production) == (
        "3c373517e811a194698dee3c5b7001bc3aa163976a7efb509474ad1075ee4667"
    )
    two_entries = "".join(
        entry(name=a.name, path=a.path, sha256=a.sha256, size=a.size, urls=list(a.urls))
        for a in manifest.load_manifest(REPO / "tests/image/assets.toml")
        if a.name in ("speech_tokenizer_v3_25hz", "o200k_base")
    )
    assert manifest.manifest_digest(manifest.parse_manifest(two_entries)) == (
        "03979149e6cbe96de36afadc0899c85dd8ae38144bb7b581a0815d0e7021ffde"
    )


def test_digest_covers_declared_consumers() -> None:
    plain = manifest.parse_manifest(entry())
    declared = manifest.parse_manifest(consumer() + entry())
    moved = manifest.parse_manifest(consumer("whisper", "$WHISPER_CACHE") + entry())
    assert len({manifest.manifest_digest(m) for m in (plain, declared, moved)}) == 3
    canonical = (
        '{"assets":[{"path":"data/blob.bin","sha256":"' + SHA + '","size":null}],'
        '"consumers":[{"locations":["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"],"name":"whisper"}]}'
    )
    assert manifest.manifest_digest(declared) == hashlib.sha256(canonical.encode()).hexdigest()


def test_digest_ignores_the_order_of_consumer_tables() -> None:
    a, b = consumer("a", "$A_DIR"), consumer("b", "$B_DIR")
    assert manifest.manifest_digest(manifest.parse_manifest(a + b + entry())) == manifest.manifest_digest(
        manifest.parse_manifest(entry() + b + a)
    )


def test_select_keeps_the_declared_consumers() -> None:
    assets = manifest.parse_manifest(consumer() + GROUPED)
    assert [c.name for c in manifest.select(assets, ["vllm"]).declared] == ["whisper"]


def test_declared_consumer_owns_nested_paths() -> None:
    assets = manifest.parse_manifest(
        consumer("nltk", "$NLTK_DATA") + entry(path="nltk/corpora/stopwords/english")
    )
    assert [c.name for c in assets.consumers()] == [
        "s3tokenizer",
        "tiktoken",
        "hub",
        "vllm_public_assets",
        "nltk",
    ]  # the Hub and vLLM's public assets are built-in entries
    owner = [c for c in assets.consumers() if c.owns(assets[0].path)]
    assert [c.name for c in owner] == ["nltk"]


@pytest.mark.parametrize(
    "location",
    [
        "$WHISPER_CACHE",
        "${XDG_CACHE_HOME:-$HOME/.cache}/whisper",
        "${XDG_CACHE_HOME:-$HOME}/whisper/models",
        "${WHISPER_HOME:-/opt/whisper}",
        "${WHISPER_HOME:-/}/w",
        "${XDG_DATA_HOME:-$HOME/.local/share}/my app",
    ],
)
def test_good_locations_parse_and_print_back(location: str) -> None:
    (declared,) = manifest.parse_manifest(consumer("w", location) + entry()).declared
    assert [str(loc) for loc in declared.locations] == [location]


@pytest.mark.parametrize(
    ("location", "needle"),
    [
        pytest.param("$(rm -rf /)", "is not $VAR", id="command-substitution"),
        pytest.param("`id`", "is not $VAR", id="backquote"),
        pytest.param("$HOME/.cache/w", "is not $VAR", id="plain-home"),
        pytest.param("/opt/w", "is not $VAR", id="plain-path"),
        pytest.param("${W:-${X:-/a}}/b", "is not $VAR", id="nested-expansion"),
        pytest.param("${W:=/a}/b", "is not $VAR", id="assign-default"),
        pytest.param("${W-/a}/b", "is not $VAR", id="no-colon"),
        pytest.param("$W/sub", "is not $VAR", id="var-with-sub"),
        pytest.param("${W:-relative}/b", "absolute path or $HOME", id="relative-default"),
        pytest.param("${W:-}/b", "absolute path or $HOME", id="empty-default"),
        pytest.param("${W:-/a/../b}/c", "absolute path or $HOME", id="dotdot-default"),
        pytest.param("${W:-$HOMEX}/c", "absolute path or $HOME", id="home-prefix-only"),
        pytest.param("${W:-$XDG}/c", "absolute path or $HOME", id="other-var-default"),
        pytest.param("${W:-/a//b}/c", "absolute path or $HOME", id="empty-component"),
        pytest.param("${W:-/a}/../c", "plain path components", id="dotdot-sub"),
        pytest.param("${W:-/a}/$X", "plain path components", id="var-in-sub"),
        pytest.param("${W:-/a}/b/", "plain path components", id="trailing-slash"),
        pytest.param("${W:-/a}/b\tc", "plain path components", id="tab"),
        pytest.param("$PATH", "$PATH, which bake may not serve", id="PATH"),
        pytest.param("${HOME:-/root}/w", "$HOME, which bake may not serve", id="HOME"),
        pytest.param("$IFS", "$IFS, which", id="IFS"),
        pytest.param("${TMPDIR:-/tmp}/w", "$TMPDIR, which", id="TMPDIR"),
        pytest.param("$LD_PRELOAD", "$LD_PRELOAD, which", id="LD_"),
        pytest.param("$BAKE_ASSETS", "$BAKE_ASSETS, which", id="BAKE_"),
        pytest.param("$PYTHONHOME", "$PYTHONHOME, which bake may not serve", id="PYTHONHOME"),
        pytest.param("${BASH_ENV:-/etc}/w", "$BASH_ENV, which bake may not serve", id="BASH_ENV"),
        pytest.param("${PWD:-/work}/cache", "$PWD, which bake may not serve", id="PWD"),
        pytest.param("$ENV", "$ENV, which", id="ENV"),
        pytest.param("$CDPATH", "$CDPATH, which", id="CDPATH"),
        pytest.param("${OLDPWD:-/a}/b", "$OLDPWD, which", id="OLDPWD"),
        pytest.param("$SHELL", "$SHELL, which", id="SHELL"),
        pytest.param("$PS4", "$PS4, which", id="PS4"),
        pytest.param("$PYTHONPATH", "$PYTHONPATH, which", id="PYTHON*"),
        pytest.param("$PERL5LIB", "$PERL5LIB, which", id="PERL5*"),
        pytest.param("$RUBYOPT", "$RUBYOPT, which", id="RUBY*"),
        pytest.param("$NODE_OPTIONS", "$NODE_OPTIONS, which", id="NODE_*"),
        pytest.param("$JAVA_TOOL_OPTIONS", "$JAVA_TOOL_OPTIONS, which", id="JAVA_TOOL_OPTIONS"),
        pytest.param("$1", "is not $VAR", id="positional"),
    ],
)
def test_bad_location_is_exit_2_naming_the_consumer(location: str, needle: str) -> None:
    with pytest.raises(ManifestError) as err:
        manifest.parse_manifest(consumer("whisper", location) + entry())
    assert str(err.value).startswith("consumer 'whisper': location")
    assert needle in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("var", ["PYTHONHOME", "BASH_ENV", "PWD"])
@pytest.mark.parametrize("command", ["seal", "manifest check"])
def test_a_location_variable_that_decides_what_runs_is_exit_2_at_seal_and_check(
    tmp_path: Path, var: str, command: str
) -> None:
    text = consumer("runner", f"${{{var}:-/opt}}/cache") + entry()
    (tmp_path / "m.toml").write_text(text)
    args = [*command.split(), "--manifest", str(tmp_path / "m.toml")]
    if command == "seal":
        args += ["--dest", str(tmp_path / "dest")]

    done = bake(*args)

    assert done.returncode == 2, done.stderr
    assert (
        f"consumer 'runner': location '${{{var}:-/opt}}/cache' uses ${var}, which bake may not serve"
        in done.stderr
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param(consumer(prefix="w/"), "unknown key(s) prefix", id="unknown-key"),
        pytest.param("[consumer]\nname = 'w'\n", "array of tables written [[consumer]]", id="not-array"),
        pytest.param(consumer("s3tokenizer", "$S3"), "is a built-in consumer", id="builtin-name"),
        pytest.param(consumer("bake.serve", "$S3"), "name 'bake.serve'", id="reserved-name"),
        pytest.param(consumer("a/b", "$S3"), "name 'a/b'", id="slash-name"),
        pytest.param("[[consumer]]\nname = 'w'\n", "locations must be a non-empty list", id="no-locations"),
        pytest.param("[[consumer]]\nname = 'w'\nlocations = []\n", "non-empty list", id="empty-locations"),
        pytest.param(consumer("w", "$W") + consumer("w", "$V"), "declared twice", id="duplicate"),
        pytest.param(
            consumer("a", "${XDG_CACHE_HOME:-$HOME/.cache}"), "nests with", id="contains-s3tokenizer"
        ),
        pytest.param(
            consumer("a", "${XDG_CACHE_HOME:-/x}/s3tokenizer/a"), "nests with", id="inside-s3tokenizer"
        ),
        pytest.param(consumer("a", "${A:-$HOME/.cache}/s3tokenizer"), "nests with", id="same-default"),
        pytest.param(consumer("a", "$TIKTOKEN_CACHE_DIR"), "nests with", id="same-variable"),
        pytest.param(consumer("a", "$A") + consumer("b", "${A:-/x}/y"), "nests with", id="under-export"),
        pytest.param(consumer("a", "$A", "$A"), "nests with", id="twice-in-one"),
    ],
)
def test_bad_consumer_table_is_exit_2(text: str, needle: str) -> None:
    with pytest.raises(ManifestError) as err:
        manifest.parse_manifest(text + entry())
    assert needle in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    "path",
    ["bake.serve", "data/a\tb", "data/a\nb", "data/\x7f"],
    ids=["reserved-serve", "tab", "newline", "del"],
)
def test_paths_that_bake_serve_could_not_carry_are_refused(path: str) -> None:
    raw = {"name": "n", "path": path, "sha256": SHA, "urls": ["https://example.org/n"]}
    with pytest.raises(ManifestError, match=r"reserved|control characters"):
        manifest.parse_asset(raw, 0)


@settings(
    max_examples=300 if os.environ.get("CI") else 100, derandomize=bool(os.environ.get("CI")), deadline=None
)
@given(st.text(alphabet=st.sampled_from(list("$/{}:-_.AZaz09 `\t\\'\"~*?HOME")), max_size=30))
def test_any_location_text_is_parsed_or_refused_with_exit_2(text: str) -> None:
    try:
        (declared,) = manifest.parse_manifest(consumer("w", text) + entry()).declared
    except ManifestError as err:
        assert err.exit_code == 2 and str(err).startswith("consumer 'w'")
        return
    (loc,) = declared.locations
    # What parses prints back unchanged and carries nothing bake.serve could not hold.
    assert str(loc) == text
    assert not any(c in text for c in "\t\n`\\\"'")


def test_a_signing_table_names_the_verify_key_beside_the_manifest_and_leaves_the_digest(
    tmp_path: Path,
) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text(entry(groups=["vllm"]))
    signed = tmp_path / "signed.toml"
    signed.write_text('[signing]\nverify-key = "keys/assets.pub"\ntlog = false\n\n' + entry(groups=["vllm"]))
    loaded = manifest.load_manifest(signed)
    assert loaded.signing == manifest.Signing(str(tmp_path / "keys/assets.pub"), tlog=False)
    assert manifest.select(loaded, ["vllm"]).signing == loaded.signing
    assert manifest.manifest_digest(loaded) == manifest.manifest_digest(manifest.load_manifest(plain))
    assert manifest.load_manifest(plain).signing is None


def test_a_kms_verify_key_is_kept_as_written(tmp_path: Path) -> None:
    path = tmp_path / "assets.toml"
    path.write_text('[signing]\nverify-key = "awskms:///alias/bake-assets"\n\n' + entry())
    assert manifest.load_manifest(path).signing == manifest.Signing("awskms:///alias/bake-assets")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('verify-key = ""', "verify-key must be a public key file or a KMS URI"),
        ("verify-key = 3", "verify-key must be a public key file or a KMS URI"),
        ("tlog = false", "verify-key must be a public key file or a KMS URI"),
        ('verify-key = "k.pub"\ntlog = "no"', "tlog must be true or false"),
        ('verify-key = "k.pub"\nkey = "k.key"', r"\[signing\]: unknown key\(s\) key"),
    ],
)
def test_a_bad_signing_table_is_a_manifest_error(table: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        manifest.parse_manifest(f"[signing]\n{table}\n\n" + entry())

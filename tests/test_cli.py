"""The ``bake`` command line: exit codes, messages and files, run as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from bake import consumers, index
from tests.runners import REPO, bake


@pytest.fixture
def source(tmp_path: Path) -> dict:
    """Two files served by file:// URLs and a manifest naming them."""
    src = tmp_path / "src"
    src.mkdir()
    files = {"one": b"first asset\n" * 100, "two": os.urandom(50_000)}
    tables = []
    for name, data in files.items():
        (src / name).write_bytes(data)
        tables.append(
            f'[[asset]]\nname = "{name}"\npath = "data/{name}.bin"\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n'
            f'urls = ["{(src / name).as_uri()}"]\ngroups = ["{name}"]\n'
        )
    manifest = tmp_path / "assets.toml"
    manifest.write_text("\n".join(tables))
    return {"manifest": manifest, "files": files, "src": src, "tmp": tmp_path}


def fetch(source: dict, *extra: str) -> subprocess.CompletedProcess:
    return bake(
        "fetch",
        "--manifest",
        str(source["manifest"]),
        "--dest",
        str(source["tmp"] / "dest"),
        "--cache-dir",
        str(source["tmp"] / "cache"),
        "--timeout",
        "5",
        *extra,
    )


def test_fetch_installs_verified_files_and_index(source: dict) -> None:
    report = source["tmp"] / "report.json"
    result = fetch(source, "--json", str(report))
    assert result.returncode == 0, result.stderr
    dest = source["tmp"] / "dest"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "SHA256SUMS",
        "bake.lock.json",
        "data/one.bin",
        "data/two.bin",
    ]
    for name, data in source["files"].items():
        assert (dest / f"data/{name}.bin").read_bytes() == data
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=dest).returncode == 0
    records = {r["name"]: r for r in json.loads(report.read_text())["assets"]}
    assert set(records) == {"one", "two"}
    assert records["two"]["size"] == len(source["files"]["two"])
    assert records["two"]["source"].startswith("file://")
    assert "one: ready in" in result.stderr


def test_fetch_group_selects_only_that_group(source: dict) -> None:
    assert fetch(source, "--group", "two").returncode == 0
    dest = source["tmp"] / "dest"
    assert not (dest / "data/one.bin").exists()
    assert (dest / "SHA256SUMS").read_text().count("\n") == 1


def test_fetch_of_a_lying_source_exits_3_and_leaves_nothing(source: dict) -> None:
    (source["src"] / "two").write_bytes(b"not what the manifest says")
    report = source["tmp"] / "report.json"
    result = fetch(source, "--json", str(report))
    assert result.returncode == 3, result.stderr
    # One record per asset, the failed one too; the error says why, structured (docs/json.md).
    doc = json.loads(report.read_text())
    assert [(r["name"], r["ok"]) for r in doc["assets"]] == [("one", True), ("two", False)]
    (error,) = doc["errors"]
    served = len(b"not what the manifest says")
    assert (error["kind"], error["asset"]) == ("size-mismatch", "two"), error
    assert (error["expected"], error["seen"]) == (len(source["files"]["two"]), served), error
    assert "two" in result.stderr
    assert "sha256" in result.stderr
    dest = source["tmp"] / "dest"
    assert not (dest / "data/two.bin").exists()
    assert not (dest / "SHA256SUMS").exists(), "the index is only written after every asset verified"
    assert (dest / "data/one.bin").read_bytes() == source["files"]["one"], "good assets still land"


def test_fetch_with_an_unreadable_ca_bundle_exits_2_and_makes_nothing(source: dict) -> None:
    source["manifest"].write_text(source["manifest"].read_text().replace("file://", "https://x.invalid/"))
    result = fetch(source, "--ca-bundle", str(source["tmp"] / "missing.pem"))
    assert result.returncode == 2, result.stderr
    assert "missing.pem" in result.stderr
    assert not (source["tmp"] / "dest").exists()
    assert not (source["tmp"] / "cache").exists()


def test_fetch_bad_manifest_exits_2(source: dict) -> None:
    source["manifest"].write_text('[[asset]]\nname = "x"\npath = "../x"\nsha256 = "00"\nurls = []\n')
    result = fetch(source)
    assert result.returncode == 2
    assert "asset 'x'" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["fetch"], id="fetch-no-dest"),
        pytest.param(["fetch", "--dest", "d", "--connections", "0"], id="connections-zero"),
        pytest.param(["fetch", "--dest", "d", "--mirror", "no-equals-sign"], id="bad-mirror"),
        pytest.param(["fetch", "--dest", "d", "--no-origin"], id="no-origin-without-mirror"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    result = bake(*args, cwd=REPO)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip(), "every non-zero exit says why on stderr"


def test_verify_against_manifest_and_lock(source: dict) -> None:
    assert fetch(source).returncode == 0
    dest = source["tmp"] / "dest"
    assert bake("verify", "--manifest", str(source["manifest"]), "--dest", str(dest)).returncode == 0
    # Without a manifest (as inside an image) the lock says what must be there.
    assert bake("verify", "--dest", str(dest), cwd=source["tmp"]).returncode == 0
    (dest / "data/one.bin").chmod(0o644)
    (dest / "data/one.bin").write_bytes(b"tampered")
    result = bake("verify", "--dest", str(dest), cwd=source["tmp"])
    assert result.returncode == 3
    assert "data/one.bin" in result.stderr


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


def test_doctor_exits_3_when_a_consumer_would_download(source: dict) -> None:
    assert fetch(source).returncode == 0
    dest = source["tmp"] / "dest"
    # Fetched but not sealed: the entrypoint would serve nothing, so every consumer would download.
    unsealed = bake("doctor", "--assets", str(dest))
    assert unsealed.returncode == 3 and "bake seal" in unsealed.stderr, unsealed.stderr
    assert bake("seal", "--manifest", str(source["manifest"]), "--dest", str(dest)).returncode == 0
    # The fixture's assets are no consumer's files, so nothing to judge: exit 0.
    assert bake("doctor", "--assets", str(dest)).returncode == 0
    vocab = b"vocab"
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    baked = source["tmp"] / "baked"
    (baked / "tiktoken").mkdir(parents=True)
    (baked / "tiktoken" / hashlib.sha1(url.encode()).hexdigest()).write_bytes(vocab)
    (baked / "bake.lock.json").write_text(
        json.dumps(
            {
                "assets": [
                    {
                        "path": f"tiktoken/{hashlib.sha1(url.encode()).hexdigest()}",
                        "size": 5,
                        "sha256": hashlib.sha256(vocab).hexdigest(),
                    }
                ]
            }
        )
    )
    # What seal writes beside the lock for the built-in consumers.
    (baked / "bake.serve").write_text(consumers.serve_text(consumers.table([]), index.read_lock(baked), {}))
    empty = source["tmp"] / "empty"
    empty.mkdir()
    result = bake(
        "doctor",
        "--assets",
        str(baked),
        env={"TIKTOKEN_RS_CACHE_DIR": str(empty), "TIKTOKEN_CACHE_DIR": str(empty)},
    )
    assert result.returncode == 3
    assert "WOULD DOWNLOAD  openai-harmony" in result.stdout
    assert "bake-entrypoint --print-env" in result.stderr


def test_seal_after_fetch(source: dict) -> None:
    assert fetch(source).returncode == 0
    dest = source["tmp"] / "dest"
    assert bake("seal", "--manifest", str(source["manifest"]), "--dest", str(dest)).returncode == 0
    assert oct((dest / "data/one.bin").stat().st_mode & 0o777) == "0o444"
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755)


def test_fetch_into_a_dest_locked_for_another_selection_warns_naming_both(source: dict) -> None:
    assert fetch(source, "--group", "one").returncode == 0
    first = json.loads((source["tmp"] / "dest" / "bake.lock.json").read_text())["manifest_digest"]
    again = fetch(source, "--group", "one")
    assert again.returncode == 0 and "another selection" not in again.stderr, again.stderr
    other = fetch(source, "--group", "two")
    assert other.returncode == 0, other.stderr
    (line,) = [line for line in other.stderr.splitlines() if "another selection" in line]
    second = json.loads((source["tmp"] / "dest" / "bake.lock.json").read_text())["manifest_digest"]
    assert first in line and second in line and "--group two" in line, line
    assert "will not list one" in line, line

"""The ``--json`` report as a contract: one versioned schema (bake/report.schema.json, docs/json.md),
written by fetch, verify, doctor and harvest --diff, complete on failure, its errors structured.

Every report these tests make is validated against the schema the package ships.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest

from bake import report
from tests.mirror import Mirror
from tests.reliability import manifest_text
from tests.runners import REPO, bake

GOOD = b"a file that is what the manifest says\n"
WANTED = b"the file the second entry names\n"
OTHER = b"the bytes a lying origin serves\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def valid(doc: dict) -> dict:
    """``doc``, after checking it against the shipped schema."""
    schema = json.loads(report.SCHEMA.read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["version"] == report.VERSION == "1"
    return doc


def read(proc: subprocess.CompletedProcess[str], target: str | Path) -> dict:
    text = proc.stdout if str(target) == "-" else Path(target).read_text()
    return valid(json.loads(text))


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(report.SCHEMA.read_text()))


def test_docs_name_every_field_of_the_schema() -> None:
    schema = json.loads(report.SCHEMA.read_text())
    doc = (REPO / "docs/json.md").read_text()
    names = set(schema["properties"])
    for definition in schema["$defs"].values():
        names |= set(definition.get("properties", {}))
    names |= set(schema["$defs"]["error"]["properties"]["kind"]["enum"])
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"docs/json.md does not name {missing}"


def test_the_readme_says_what_the_report_is() -> None:
    text = (REPO / "README.md").read_text()
    assert "docs/json.md" in text and "one JSON record per asset" not in text


@pytest.fixture
def served(tmp_path: Path, clean_net_env: None):
    """A loopback mirror serving GOOD at /good.bin, OTHER at /lie.bin and nothing at /gone.bin."""
    with Mirror({"/good.bin": GOOD, "/lie.bin": OTHER}) as mirror:
        yield mirror


def _fetch(tmp_path: Path, served: Mirror, target: str, *extra: str) -> subprocess.CompletedProcess[str]:
    entries = [
        {"name": "good", "path": "data/good.bin", "sha256": sha(GOOD), "urls": [served.url("/good.bin")]},
        {
            "name": "bad",
            "path": "data/bad.bin",
            "sha256": sha(WANTED),
            "urls": [served.url("/gone.bin"), served.url("/lie.bin")],
        },
    ]
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text(entries))
    return bake("fetch", "--manifest", manifest, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                "--attempts", "1", "--json", target, *extra, cwd=tmp_path)  # fmt: skip


@pytest.mark.parametrize("to", ["file", "stdout"])
def test_a_failed_fetch_reports_every_asset_and_each_source_structured(
    tmp_path: Path, served: Mirror, to: str
) -> None:
    target = str(tmp_path / "report.json") if to == "file" else "-"
    proc = _fetch(tmp_path, served, target)
    assert proc.returncode == 3, proc.stderr
    doc = read(proc, target)
    assert (doc["command"], doc["ok"], doc["exit_code"]) == ("fetch", False, 3)
    assert {a["name"]: a["ok"] for a in doc["assets"]} == {"good": True, "bad": False}
    gone, lie = doc["errors"]
    assert (gone["kind"], gone["asset"], gone["http_status"]) == ("http-status", "bad", 404), gone
    assert gone["url"] == served.url("/gone.bin")
    assert (lie["kind"], lie["expected"], lie["seen"]) == ("sha256-mismatch", sha(WANTED), sha(OTHER)), lie
    assert lie["url"] == served.url("/lie.bin") and lie["http_status"] is None
    if to == "stdout":
        assert "asset(s) verified" not in proc.stdout  # stdout holds the document alone


def test_a_fetch_that_succeeds_reports_where_each_asset_came_from(tmp_path: Path, served: Mirror) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text([{"name": "good", "path": "data/good.bin", "sha256": sha(GOOD),
                                        "urls": [served.url("/good.bin")]}]))  # fmt: skip
    proc = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                "--json", "-", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = read(proc, "-")
    assert doc["ok"] and doc["errors"] == [] and re.fullmatch("[0-9a-f]{64}", doc["manifest_digest"])
    (asset,) = doc["assets"]
    assert (asset["source"], asset["bytes"], asset["size"]) == (served.url("/good.bin"), len(GOOD), len(GOOD))
    assert "asset(s) verified" in proc.stderr  # the result line, out of the document's way


def test_a_bad_manifest_is_reported_too(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text('[[asset]]\nname = "x"\n')
    target = tmp_path / "report.json"
    proc = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "d", "--json", target, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    doc = read(proc, target)
    assert doc["exit_code"] == 2 and doc["assets"] == []
    (error,) = doc["errors"]
    assert error["kind"] == "manifest" and "missing required key" in error["message"], error


def test_an_unwritable_report_path_is_refused_before_any_work(tmp_path: Path) -> None:
    proc = bake("verify", "--dest", tmp_path, "--json", tmp_path / "no-such-dir" / "r.json", cwd=tmp_path)
    assert proc.returncode == 2 and "give a writable file path" in proc.stderr, proc.stderr


@pytest.fixture
def fetched(tmp_path: Path, served: Mirror) -> tuple[Path, Path]:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text([{"name": "good", "path": "data/good.bin", "sha256": sha(GOOD),
                                        "size": len(GOOD), "urls": [served.url("/good.bin")]}]))  # fmt: skip
    proc = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    return manifest, tmp_path / "dest"


@pytest.mark.parametrize("against", ["manifest", "lock"])
def test_verify_reports_each_file_and_what_it_found(fetched: tuple[Path, Path], against: str) -> None:
    manifest, dest = fetched
    (dest / "data/good.bin").unlink()
    (dest / "data/good.bin").write_bytes(OTHER)
    options = ["--manifest", str(manifest)] if against == "manifest" else []
    proc = bake("verify", *options, "--dest", dest, "--json", "-")
    assert proc.returncode == 3, proc.stderr
    doc = read(proc, "-")
    (asset,) = doc["assets"]
    assert (asset["path"], asset["ok"]) == ("data/good.bin", False)
    assert asset["name"] == ("good" if against == "manifest" else None)
    (error,) = doc["errors"]
    assert (error["kind"], error["path"], error["expected"], error["seen"]) == (
        "size-mismatch", "data/good.bin", len(GOOD), len(OTHER)
    )  # fmt: skip
    assert doc["against"] == (str(manifest) if against == "manifest" else str(dest / "bake.lock.json"))


def test_doctor_and_harvest_diff_write_the_schema(fetched: tuple[Path, Path], tmp_path: Path) -> None:
    manifest, dest = fetched
    assert bake("seal", "--manifest", manifest, "--dest", dest).returncode == 0
    proc = bake("doctor", "--assets", dest, "--json", "-")
    doc = read(proc, "-")
    assert doc["command"] == "doctor" and doc["exit_code"] == proc.returncode == 0, proc.stderr
    assert doc["findings"] == []  # data/ belongs to no consumer
    empty = tmp_path / "caches"
    empty.mkdir()
    proc = bake("harvest", "--diff", dest, empty, "--json", tmp_path / "diff.json")
    doc = read(proc, tmp_path / "diff.json")
    assert (doc["command"], doc["exit_code"], doc["root"]) == ("harvest --diff", 0, str(dest))
    refused = bake("harvest", empty, "--manifest", manifest, "--json", "-")
    assert refused.returncode == 2 and "--json reports harvest --diff" in refused.stderr

"""``bake fetch`` run as a user runs it: the files and index it installs, its --group, its exit codes and
the warning when the destination was locked for another selection (bake/commands/fetch.py)."""

from __future__ import annotations

import json
import subprocess

from tests.commands.conftest import fetch


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

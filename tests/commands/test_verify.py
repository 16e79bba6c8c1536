"""``bake verify``: the files under --dest checked against a manifest or the lock, what its help says it
reads, and the options that do not go together (bake/commands/verify.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands.conftest import fetch
from tests.runners import bake


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


def test_verify_help_says_what_verify_reads(tmp_path: Path) -> None:
    text = bake("verify", "--help", cwd=tmp_path).stdout
    assert "bake.lock.json" in text and "no default manifest" in text, text
    assert "docker/assets.toml" not in text, text  # verify never reads the default manifest


def test_the_json_report_names_each_file_and_the_one_that_failed(source: dict) -> None:
    assert fetch(source).returncode == 0
    dest = source["tmp"] / "dest"
    (dest / "data/two.bin").chmod(0o644)
    (dest / "data/two.bin").write_bytes(b"tampered")
    report = source["tmp"] / "report.json"
    proc = bake("verify", "--manifest", source["manifest"], "--dest", dest, "--json", report)
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(report.read_text())
    assert doc["against"] == str(source["manifest"])
    assert [(a["name"], a["path"], a["ok"]) for a in doc["assets"]] == [
        ("one", "data/one.bin", True),
        ("two", "data/two.bin", False),
    ]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "verify takes --dest D [--manifest M], or --image REF --key KEY"),
        (["--dest", "d", "--key", "k.pub"], "verify takes --dest D [--manifest M], or --image REF --key KEY"),
        (["--image", "r.example/x:1"], "verify takes --dest D [--manifest M], or --image REF --key KEY"),
        (["--image", "r.example/x:1", "--key", "k.pub", "--json", "-"], "--json and --allow-http apply to"),
        (["--dest", "d", "--group", "g"], "--group needs --manifest"),
    ],
    ids=["nothing to check", "a key for a directory", "an image without a key", "json for an image",
         "a group without a manifest"],
)  # fmt: skip
def test_options_that_do_not_go_together_exit_2(argv: list[str], says: str, tmp_path: Path) -> None:
    proc = bake("verify", *argv, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr

"""bake/harvest/command.py: ``bake harvest``'s parser, what it prints and its exit codes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bake.cli import build_parser
from bake.harvest import command
from tests.harvest.conftest import harvest
from tests.runners import bake

pytestmark = pytest.mark.timeout(120)


def test_unreadable_and_bad_input_exit_codes(tmp_path: Path) -> None:
    missing = harvest(tmp_path / "nope", "--manifest", tmp_path / "m.toml")
    assert missing.returncode == 3 and "cannot read it as a cache" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[[asset]\n")
    assert harvest(tmp_path, "--manifest", bad).returncode == 2
    assert harvest("--manifest", bad).returncode == 2  # no DIR
    lock_less = harvest("--diff", tmp_path / "nope", tmp_path)
    assert lock_less.returncode == 2 and "not a directory" in lock_less.stderr


def test_its_parser_takes_dirs_and_pins_by_default() -> None:
    args = build_parser().parse_args(["harvest", "one", "two"])
    assert args.dirs == ["one", "two"]
    assert (args.manifest, args.group, args.diff, args.json) == (None, [], None, None)
    assert args.run is command.cmd_harvest


def test_the_manifest_bake_manifest_names_is_the_one_harvest_edits(tmp_path: Path) -> None:
    empty = tmp_path / "caches"
    empty.mkdir()
    manifest = tmp_path / "site.toml"
    proc = bake("harvest", empty, env={"BAKE_MANIFEST": str(manifest)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{empty}: no cache of any consumer found there" in proc.stderr
    assert proc.stdout == f"bake: nothing new to pin in {manifest}\n"
    assert not manifest.exists()


def test_diff_with_json_to_stdout_reports_nothing_lacking(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(b"baked\n")
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        f'[[asset]]\nname = "f"\npath = "d/f.bin"\nsha256 = "{sha}"\nurls = ["{src.as_uri()}"]\n'
    )
    root = tmp_path / "root"
    for args in (("fetch", "--cache-dir", tmp_path / "c"), ("seal",)):
        assert bake(*args, "--manifest", manifest, "--dest", root).returncode == 0
    (tmp_path / "caches").mkdir()
    proc = bake("harvest", "--diff", root, tmp_path / "caches", "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["root"] == str(root) and doc["lacking"] == {"assets": [], "hub": []}
    assert doc["not_pinned"] == []
    assert f"bake: {root} has everything the caches hold" in proc.stderr

"""``bake add``: the options each kind of target refuses, and the file:// URL it suggests for a local
path (bake/commands/add.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake.manifest import load_manifest
from tests.runners import bake


def test_add_with_a_path_suggests_its_file_url(tmp_path: Path) -> None:
    source = tmp_path / "model.bin"
    source.write_bytes(b"a model")
    proc = bake("add", str(source), "--path", "d/model.bin", "--manifest", tmp_path / "m.toml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"for a local file write file://{source}" in proc.stderr, proc.stderr


def test_add_fetches_a_file_once_and_appends_its_entry(tmp_path: Path) -> None:
    source = tmp_path / "model.bin"
    source.write_bytes(b"a model\n" * 64)
    manifest = tmp_path / "m.toml"
    proc = bake("add", source.as_uri(), "--path", "d/model.bin", "--group", "g", "--manifest", manifest,
                "--cache-dir", tmp_path / "cache", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    assert f"bake: added model (d/model.bin, 512 bytes, sha256 {sha}) to {manifest}" in proc.stdout
    (asset,) = load_manifest(manifest)
    assert (asset.path, asset.sha256, asset.size, asset.groups) == ("d/model.bin", sha, 512, ("g",))


def test_add_with_the_wrong_sha256_exits_3_and_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "model.bin"
    source.write_bytes(b"a model")
    manifest = tmp_path / "m.toml"
    proc = bake("add", source.as_uri(), "--path", "d/model.bin", "--sha256", "0" * 64, "--manifest", manifest,
                "--cache-dir", tmp_path / "cache", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert not manifest.exists()


@pytest.mark.parametrize(
    ("target", "option", "says"),
    [
        ("hf://org/repo", ["--path", "x"], "--path is for one file; hf://org/repo pins a whole repository"),
        ("hf://org/repo", ["--size-only"], "--size-only is for one file"),
        ("file:///x.bin", ["--path", "x.bin", "--include", "*.json"], "--include is for hf://ORG/REPO[@REV]"),
        ("file:///x.bin", ["--path", "x.bin", "--repo-type", "dataset"], "--repo-type is for hf://ORG/REPO"),
        ("x", ["--size-only", "--name", "y"], "--size-only takes only an asset NAME and fetch options"),
    ],
    ids=["path with a repository", "size-only with a repository", "include with a file",
         "repo-type with a file", "size-only with a name"],
)  # fmt: skip
def test_an_option_the_target_does_not_take_exits_2(
    target: str, option: list[str], says: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "m.toml"
    proc = bake("add", target, *option, "--manifest", manifest, "--cache-dir", tmp_path / "c", cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not manifest.exists()

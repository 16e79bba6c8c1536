"""A newcomer's first commands, shared by the hostile tests of each command (issue 28's findings).

One small asset on a file:// URL, the commands run the way a newcomer types them, and what a clean
failure is: the contract's exit code, no traceback, and exactly one ``bake: error:`` line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import KIB, asset_entry, bake, blob, error_text, manifest_text

DATA = blob(64 * KIB, "first-hour")


def add(manifest_path: Path, url: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return bake("add", url, "--path", "data/model.bin", "--manifest", manifest_path, "--cache-dir", cache,
                *args)  # fmt: skip


def assert_one_clean_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The exit code, no traceback, and exactly one ``bake: error:`` line; returns the error text."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("bake: error:") == 1, proc.stderr
    return error_text(proc.stderr)


def fetch_one(tmp_path: Path, url: str, *, size: int | None = len(DATA)) -> subprocess.CompletedProcess[str]:
    entry = asset_entry("model", "data/model.bin", DATA, url, size=False)
    if size is not None:
        entry["size"] = size
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([entry]))
    return bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                "--attempts", "3")  # fmt: skip


def write_manifest(tmp_path: Path, url: str, path: str = "data/model.bin") -> Path:
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([asset_entry("model", path, DATA, url, size=False)]))
    return target


def fetched(tmp_path: Path, source: Path, path: str = "data/model.bin") -> tuple[Path, Path]:
    """A manifest of one asset, fetched into tmp_path/dest; returns both."""
    target = write_manifest(tmp_path, source.as_uri(), path)
    dest = tmp_path / "dest"
    proc = bake("fetch", "--manifest", target, "--dest", dest, "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    return target, dest


def failing_fetch(tmp_path: Path, source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    good = asset_entry("good", "data/good.bin", DATA, source.as_uri(), size=False)
    bad = asset_entry("bad", "data/bad.bin", b"gone", source.as_uri() + ".gone", size=False)
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([good, bad]))
    return bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                *args)  # fmt: skip

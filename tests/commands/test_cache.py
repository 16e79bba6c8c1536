"""``bake cache prune`` on a real cache directory: what it keeps, what it removes, what --dry-run only
lists, and the ages it refuses (bake/commands/cache.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.runners import bake


@pytest.fixture
def cache(tmp_path: Path) -> dict[str, Path]:
    """A cache holding two verified objects, and a manifest that names only the first."""
    objects = tmp_path / "cache" / "objects"
    objects.mkdir(parents=True)
    found = {}
    for name in ("named", "stray"):
        data = f"{name} bytes\n".encode()
        found[name] = objects / hashlib.sha256(data).hexdigest()
        found[name].write_bytes(data)
    (tmp_path / "m.toml").write_text(
        f'[[asset]]\nname = "named"\npath = "d/named"\nsha256 = "{found["named"].name}"\n'
        'urls = ["https://example.org/named"]\n'
    )
    return found


def prune(tmp_path: Path, *extra: str):
    return bake("cache", "prune", "--cache-dir", tmp_path / "cache", *extra, cwd=tmp_path)


def test_prune_removes_the_entries_no_manifest_names(tmp_path: Path, cache: dict[str, Path]) -> None:
    proc = prune(tmp_path, "--manifest", "m.toml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"removed {cache['stray']}"
    assert "cache prune removed 1 file(s)" in proc.stdout and "kept 1 verified object(s)" in proc.stdout
    assert cache["named"].exists() and not cache["stray"].exists()


def test_dry_run_lists_what_would_go_and_removes_nothing(tmp_path: Path, cache: dict[str, Path]) -> None:
    proc = prune(tmp_path, "--manifest", "m.toml", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert (
        f"would remove {cache['stray']}" in proc.stdout
        and "cache prune would remove 1 file(s)" in proc.stdout
    )
    assert cache["named"].exists() and cache["stray"].exists()


def test_without_a_manifest_every_finished_entry_is_kept(tmp_path: Path, cache: dict[str, Path]) -> None:
    proc = prune(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "cache prune removed 0 file(s)" in proc.stdout and "kept 2 verified object(s)" in proc.stdout
    assert all(path.exists() for path in cache.values())


@pytest.mark.parametrize("age", ["-1", "36501", "nan", "inf", "a week"])
def test_an_age_outside_0_to_36500_days_exits_2(tmp_path: Path, age: str) -> None:
    proc = prune(tmp_path, "--max-age", age)
    assert proc.returncode == 2, proc.stderr
    assert "argument --max-age: expected a number of days from 0 to 36500" in proc.stderr, proc.stderr
    assert not (tmp_path / "cache").exists()

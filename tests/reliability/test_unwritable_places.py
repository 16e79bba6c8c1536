"""Places the fetch cannot write, through the real CLI: a contract exit with a message, never a traceback.

A --dest that cannot become a directory is a usage error (exit 2); a cache that runs out of inodes
or has a subdirectory it cannot write is a failed fetch (exit 3). Each message names the path.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import KIB, asset_entry, bake, blob, error_text, files_under, manifest_text, sha256

DATA = blob(300 * KIB + 1, "engine-exits")


def fetch(tmp_path: Path, dest: Path, cache: Path, mirror: Mirror) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text([asset_entry("e", "x/e.bin", DATA, mirror.url("/e.bin"))]))
    args = ["--dest", dest, "--cache-dir", cache, "--timeout", "2", "--deadline", "20"]
    return bake("fetch", "--manifest", manifest, *args)


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    with Mirror({"/e.bin": DATA}) as m:
        yield m


def dangling(tmp_path: Path) -> tuple[Path, str]:
    link = tmp_path / "dest-link"
    link.symlink_to(tmp_path / "nowhere" / "assets")
    return link, str(tmp_path / "nowhere" / "assets")


def looping(tmp_path: Path) -> tuple[Path, str]:
    link = tmp_path / "loop"
    link.symlink_to(link)
    return link, str(link)


def under_a_file(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "plain-file").write_text("not a directory\n")
    return tmp_path / "plain-file" / "assets", str(tmp_path / "plain-file")


DESTS: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "dangling-link": dangling,
    "link-loop": looping,
    "under-a-file": under_a_file,
}


@pytest.mark.parametrize("kind", list(DESTS))
def test_a_dest_that_cannot_become_a_directory_is_exit_2(tmp_path: Path, mirror: Mirror, kind: str) -> None:
    dest, named = DESTS[kind](tmp_path)
    proc = fetch(tmp_path, dest, tmp_path / "cache", mirror)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = error_text(proc.stderr)
    assert "--dest" in errors and named in errors, errors
    assert mirror.requests["/e.bin"] == 0  # refused before any traffic


# A tmpfs's root and the cache's objects/, partial/ and locks/ take four inodes: from five on, each count
# runs out at another step (lock file, partial, progress record, staging, index files).
def test_a_cache_out_of_inodes_is_exit_3_naming_it(
    tmp_path: Path, tmpfs: Callable[..., Path], mirror: Mirror
) -> None:
    outcomes = {}
    for inodes in range(5, 9):
        cache = tmpfs(f"cache-{inodes}", "size=16m", f"nr_inodes={inodes}")
        proc = fetch(tmp_path, tmp_path / f"dest-{inodes}", cache / "bake", mirror)
        outcomes[inodes] = proc.returncode
        assert proc.returncode in (0, 3), proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        if proc.returncode == 3:
            errors = error_text(proc.stderr)
            assert "asset 'e'" in errors or str(cache) in errors, errors
            assert "inode" in errors, errors
        else:
            assert sha256((tmp_path / f"dest-{inodes}/x/e.bin").read_bytes()) == sha256(DATA)
    assert 3 in outcomes.values(), f"no inode count was short enough: {outcomes}"


@pytest.mark.parametrize("sub", ["locks", "partial", "objects"])
def test_an_unwritable_cache_subdirectory_is_exit_3_naming_it(
    tmp_path: Path, tmpfs: Callable[..., Path], mirror: Mirror, sub: str
) -> None:
    cache = tmp_path / "cache"
    for name in ("objects", "partial", "locks"):
        (cache / name).mkdir(parents=True)
    # Root writes through any mode bits, so the directory becomes a read-only mount instead.
    tmpfs(f"cache/{sub}", "ro", "size=1m")
    proc = fetch(tmp_path, tmp_path / "dest", cache, mirror)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = error_text(proc.stderr)
    assert "asset 'e'" in errors and str(cache / sub) in errors and "--cache-dir" in errors, errors
    assert files_under(tmp_path / "dest") == []
    assert os.path.isdir(cache / sub)

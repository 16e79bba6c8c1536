"""A full disk through the real CLI, on small tmpfs mounts: exit 3 saying "no space" and how much is needed.

Nothing partial is left under --dest, files verified earlier keep their bytes and mtimes, and once
there is room a rerun completes from what the cache already holds.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import INDEX_FILES, KIB, MIB, asset_entry, bake, blob, error_text, files_under, manifest_text, sha256

PAGE = 4096
SMALL = blob(100 * KIB, "small")
BIG = blob(3 * MIB + 123, "big")  # not page-aligned: the message must give the exact size


def pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


@pytest.fixture(scope="module")
def mirror() -> Iterator[Mirror]:
    with Mirror({"/small.bin": SMALL, "/big.bin": BIG}) as m:
        yield m


def manifest(tmp_path: Path, mirror: Mirror, *names: str) -> Path:
    entries = {
        "small": asset_entry("small", "a/small.bin", SMALL, mirror.url("/small.bin")),
        "big": asset_entry("big", "b/big.bin", BIG, mirror.url("/big.bin")),
    }
    path = tmp_path / f"{'-'.join(names)}.toml"
    path.write_text(manifest_text(entries[n] for n in names))
    return path


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``root``: sha256, mtime and inode."""
    out = {}
    for rel in files_under(root):
        st = (root / rel).stat()
        out[rel] = (sha256((root / rel).read_bytes()), st.st_mtime_ns, st.st_ino)
    return out


# layout -> (what is small, tmpfs size): dest and cache on one small filesystem, or one of them small.
LAYOUTS = {
    "dest-full": ("dest", MIB),
    "cache-full": ("cache", MIB),
    "one-small-filesystem": ("both", 2 * MIB),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_no_space_exits_3_saying_how_much_and_keeps_earlier_files(
    tmp_path: Path, tmpfs: Callable[[str, int], Path], mirror: Mirror, layout: str
) -> None:
    small_fs, size = LAYOUTS[layout]
    if small_fs == "both":
        fs = tmpfs("fs", size)
        dest, cache = fs / "dest", fs / "cache"
    else:
        dest = tmpfs("dest", size) if small_fs == "dest" else tmp_path / "dest"
        cache = tmpfs("cache", size) if small_fs == "cache" else tmp_path / "cache"
    common = ["--dest", dest, "--cache-dir", cache, "--timeout", "2"]

    first = bake("fetch", "--manifest", manifest(tmp_path, mirror, "small"), *common)
    assert first.returncode == 0, first.stderr
    earlier = snapshot(dest)
    assert sorted(earlier) == sorted(["a/small.bin", *INDEX_FILES])

    both = manifest(tmp_path, mirror, "small", "big")
    full = bake("fetch", "--manifest", both, *common)
    errors = error_text(full.stderr)
    assert full.returncode == 3, full.stderr
    assert "asset 'big'" in errors and "asset 'small'" not in errors
    assert "no space" in errors and f"need {len(BIG)} bytes" in errors and "available" in errors
    assert snapshot(dest) == earlier  # no partial, no staging file, no rewritten index

    mirror.reset_counters()
    mount = fs if small_fs == "both" else dest if small_fs == "dest" else cache
    subprocess.run(["mount", "-o", "remount,size=16m", str(mount)], check=True)
    rerun = bake("fetch", "--manifest", both, *common)
    assert rerun.returncode == 0, rerun.stderr
    assert sha256((dest / "b/big.bin").read_bytes()) == sha256(BIG)
    assert snapshot(dest)["a/small.bin"] == earlier["a/small.bin"]
    # The download had completed before the copy into a full --dest failed: the cache still has it.
    assert mirror.bytes_sent["/big.bin"] == (0 if layout == "dest-full" else len(BIG))


def test_cache_too_full_for_progress_records_leaves_no_temporary(
    tmp_path: Path, tmpfs: Callable[[str, int], Path], mirror: Mirror
) -> None:
    cache = tmpfs("cache", pages(len(BIG)))  # room for the preallocated partial, not one page more
    proc = bake(
        "fetch",
        "--manifest",
        manifest(tmp_path, mirror, "big"),
        "--dest",
        tmp_path / "dest",
        "--cache-dir",
        cache,
    )
    errors = error_text(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert "asset 'big'" in errors and "no space" in errors and "need" in errors
    assert [p for p in files_under(cache) if ".bake-staging." in p] == []
    assert files_under(tmp_path / "dest") == []


def test_no_space_for_the_index_exits_3(
    tmp_path: Path, tmpfs: Callable[[str, int], Path], mirror: Mirror
) -> None:
    # The cache is elsewhere, so both assets are copied in; then room for SHA256SUMS, not for the lock.
    dest = tmpfs("dest", pages(len(SMALL)) + pages(len(BIG)) + PAGE)
    both = manifest(tmp_path, mirror, "small", "big")
    proc = bake("fetch", "--manifest", both, "--dest", dest, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 3, proc.stderr
    assert "no space" in error_text(proc.stderr) and "Traceback" not in proc.stderr
    # The two index files land together or not at all, and no staging file is left.
    assert [p for p in files_under(dest) if ".bake-staging." in p] == []
    assert not (dest / "SHA256SUMS").exists() and not (dest / "bake.lock.json").exists()

"""bake/hashes.py: SHA-256 of files and descriptors, the one-pass hashed copy, and the digests' patterns."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from bake.hashes import (
    GIT_SHA1_HEX,
    HUB_ETAG_HEX,
    SHA256_HEX,
    bare_sha256,
    copy_hashed,
    file_matches,
    git_blob_id,
    sha256_fd,
    sha256_file,
)

DATA = os.urandom(3 * 1024 + 7)  # not a whole number of the chunks used below


def test_sha256_file_is_the_hash_of_the_whole_file_whatever_the_chunk(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(DATA)
    expected = hashlib.sha256(DATA).hexdigest()
    assert sha256_file(path) == sha256_file(path, chunk=1000) == expected
    assert file_matches(path, expected) and not file_matches(path, "0" * 64)


def test_sha256_fd_hashes_from_where_the_descriptor_stands(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 100, os.SEEK_SET)
        assert sha256_fd(fd, chunk=512) == hashlib.sha256(DATA[100:]).hexdigest()
    finally:
        os.close(fd)


def test_git_blob_id_is_the_id_git_gives(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(DATA)
    git = subprocess.run(
        ["git", "hash-object", str(tmp_path / "blob")], capture_output=True, text=True, check=True
    )
    assert git_blob_id(DATA) == git.stdout.strip()
    assert git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's empty blob


@pytest.mark.parametrize(("size", "block"), [(None, 1000), (len(DATA), 1000), (len(DATA), 1 << 20), (10, 64)])
def test_copy_hashed_copies_every_byte_and_hashes_what_it_wrote(
    tmp_path: Path, size: int | None, block: int
) -> None:
    (tmp_path / "in").write_bytes(DATA)
    totals: list[int] = []
    source = os.open(tmp_path / "in", os.O_RDONLY)
    target = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        digest, count = copy_hashed(source, target, size=size, block=block, each=totals.append)
    finally:
        os.close(source)
        os.close(target)
    assert (tmp_path / "out").read_bytes() == DATA
    assert (digest, count) == (hashlib.sha256(DATA).hexdigest(), len(DATA))
    assert totals[-1] == len(DATA) and totals == sorted(totals)


def test_copy_hashed_stops_when_each_raises(tmp_path: Path) -> None:
    (tmp_path / "in").write_bytes(DATA)

    def stop(total: int) -> None:
        raise InterruptedError(total)

    source = os.open(tmp_path / "in", os.O_RDONLY)
    target = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(InterruptedError):
            copy_hashed(source, target, block=1000, each=stop)
    finally:
        os.close(source)
        os.close(target)
    assert (tmp_path / "out").read_bytes() == DATA[:1000]


@pytest.mark.parametrize(
    ("value", "bare"),
    [
        ("sha256:" + "a" * 64, "a" * 64),
        ("SHA256:" + "A" * 64, "a" * 64),
        ("B" * 64, "b" * 64),
        (None, None),
        (7, 7),
    ],
)
def test_bare_sha256_drops_the_prefix_and_lowers_the_case(value: object, bare: object) -> None:
    assert bare_sha256(value) == bare


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (SHA256_HEX, "a" * 64, ["A" * 64, "a" * 63, "a" * 64 + "\n", "g" * 64]),
        (GIT_SHA1_HEX, "0" * 40, ["0" * 39, "0" * 40 + "\n", "0" * 64]),
        (HUB_ETAG_HEX, "f" * 40, ["f" * 41, "f" * 64 + "\n", "F" * 40]),
    ],
    ids=["SHA256_HEX", "GIT_SHA1_HEX", "HUB_ETAG_HEX"],
)
def test_the_patterns_match_whole_values_only(pattern, good: str, bad: list[str]) -> None:
    assert pattern.match(good) and pattern.fullmatch(good)
    assert [b for b in bad if pattern.match(b)] == []

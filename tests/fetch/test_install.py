"""Installing into --dest: a verified file costs nothing, a wrong one is replaced, no symlink leads out,
and no two destinations share a file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bake.fetch import FetchFailed, fetch_assets
from tests.fetch.conftest import KIB, blob, fetch_one, make_asset, opts
from tests.mirror import Mirror


def test_existing_verified_dest_costs_no_request(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    (tmp_path / "dest/data").mkdir(parents=True)
    (tmp_path / "dest/data/blob.bin").write_bytes(data)
    record = fetch_one(make_asset(data, mirror.url("/absent.bin")), tmp_path)
    assert sum(mirror.requests.values()) == 0
    assert record.cached and record.source == "cache"


def test_existing_wrong_dest_file_is_replaced(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    mirror.add("/f.bin", data)
    (tmp_path / "dest/data").mkdir(parents=True)
    (tmp_path / "dest/data/blob.bin").write_bytes(b"stale")
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_symlink_out_of_dest_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest/data").symlink_to(tmp_path / "outside")
    with pytest.raises(FetchFailed, match="outside --dest"):
        fetch_one(make_asset(b"x", mirror.url("/f.bin")), tmp_path)
    assert list((tmp_path / "outside").iterdir()) == []


def test_two_dests_never_share_a_file(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(64 * KIB)
    mirror.add("/f.bin", data)
    asset = make_asset(data, mirror.url("/f.bin"))
    for dest in ("one", "two"):
        fetch_assets([asset], tmp_path / dest, opts(tmp_path))
    one, two = tmp_path / "one/data/blob.bin", tmp_path / "two/data/blob.bin"
    obj = tmp_path / "cache/objects" / asset.sha256
    assert len({os.stat(p).st_ino for p in (one, two, obj)}) == 3
    with open(one, "r+b") as f:  # an edit in place, as root makes it whatever the mode
        f.write(b"edited")
    assert two.read_bytes() == data and obj.read_bytes() == data

"""Installing into --dest: a verified file costs nothing, a wrong one is replaced, no symlink leads out,
no two destinations share a file, and a failed run takes back the directories it made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bake.errors import FetchError, UsageError
from bake.fetch import FetchFailed, fetch_assets
from bake.fetch.install import DestDirs, already_installed, install, make_dest, target_path
from tests.fetch.conftest import KIB, blob, fetch_one, files_under, make_asset, opts
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


def test_a_failed_run_takes_back_only_the_empty_directories_it_made(tmp_path: Path) -> None:
    (tmp_path / "dest/kept").mkdir(parents=True)
    dirs = DestDirs(tmp_path / "dest")
    dirs.make(tmp_path / "dest/kept/a/b")
    dirs.make(tmp_path / "dest/full/c")
    (tmp_path / "dest/full/c/file").write_bytes(b"x")
    assert dirs.made == [
        tmp_path / "dest/kept/a",
        tmp_path / "dest/kept/a/b",
        tmp_path / "dest/full",
        tmp_path / "dest/full/c",
    ]
    dirs.take_back()
    assert files_under(tmp_path / "dest") == ["full/c/file"]
    assert (tmp_path / "dest/kept").is_dir() and not (tmp_path / "dest/kept/a").exists()


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        pytest.param("file", "dest: .*dest is not a directory", id="a-file"),
        pytest.param("file-above", "dest/sub: .*dest is not a directory", id="a-file-above"),
        pytest.param("dangling-link", "is a link to .*nowhere, which is no directory", id="a-dangling-link"),
    ],
)
def test_make_dest_names_what_stands_in_the_way(tmp_path: Path, layout: str, says: str) -> None:
    dest = tmp_path / "dest"
    if layout == "dangling-link":
        dest.symlink_to(tmp_path / "nowhere")
    else:
        dest.write_bytes(b"x")
    target = dest / "sub" if layout == "file-above" else dest
    with pytest.raises(UsageError, match=says):
        make_dest(DestDirs(target))


def test_make_dest_makes_a_missing_directory(tmp_path: Path) -> None:
    dirs = DestDirs(tmp_path / "a/dest")
    make_dest(dirs)
    assert (tmp_path / "a/dest").is_dir() and dirs.made == [tmp_path / "a", tmp_path / "a/dest"]


def test_target_path_follows_the_asset_path_and_refuses_a_link_out(tmp_path: Path) -> None:
    asset = make_asset(b"x", "https://m/f", path="models/v1/f.bin")
    (tmp_path / "dest").mkdir()
    assert target_path(tmp_path / "dest", asset) == tmp_path / "dest/models/v1/f.bin"
    (tmp_path / "dest/models").symlink_to(tmp_path)
    with pytest.raises(FetchError, match="outside --dest"):
        target_path(tmp_path / "dest", asset)


@pytest.mark.parametrize(
    ("present", "installed"),
    [
        pytest.param(None, False, id="missing"),
        pytest.param(b"right bytes", True, id="verified"),
        pytest.param(b"wrong bytes", False, id="same-size-other-bytes"),
        pytest.param(b"short", False, id="other-size"),
        pytest.param("directory", False, id="a-directory"),
    ],
)
def test_already_installed(tmp_path: Path, present: bytes | str | None, installed: bool) -> None:
    target = tmp_path / "f.bin"
    if present == "directory":
        target.mkdir()
    elif present is not None:
        target.write_bytes(present)
    assert already_installed(target, make_asset(b"right bytes", "https://m/f")) is installed


@pytest.mark.parametrize("matches", [True, False])
def test_install_puts_a_file_of_its_own_or_nothing(tmp_path: Path, matches: bool) -> None:
    data = blob(64 * KIB)
    obj = tmp_path / "object"
    obj.write_bytes(data if matches else data[::-1])
    dirs = DestDirs(tmp_path / "dest")
    target = tmp_path / "dest/data/blob.bin"
    assert install(obj, target, make_asset(data, "https://m/f"), dirs, verify=True) is matches
    if matches:
        assert target.read_bytes() == data and target.stat().st_ino != obj.stat().st_ino
    assert files_under(tmp_path / "dest") == (["data/blob.bin"] if matches else [])

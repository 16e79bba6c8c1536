"""bake.seed.nodefs: node storage reached by directory descriptors, never through a link."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from bake.seed import nodefs


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", ["link", "FIFO", "socket", "device"])
def test_open_regular_names_what_is_there_and_opens_nothing_else(tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"do not touch")
    name = tmp_path / "lock"
    if planted == "link":
        name.symlink_to(victim)
    elif planted == "FIFO":
        os.mkfifo(name)  # opened, it would block this test forever
    elif planted == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(name))
    else:
        os.mknod(name, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(nodefs.Planted) as caught:
            nodefs.open_regular(fd, "lock", f"{tmp_path}/lock", os.O_RDWR)
    finally:
        os.close(fd)
    kind = {"link": "a symbolic link", "FIFO": "a FIFO", "socket": "a socket", "device": "a device"}[planted]
    assert str(caught.value) == f"{tmp_path}/lock is {kind}"
    assert victim.read_bytes() == b"do not touch"


def test_directories_are_walked_and_made_without_following_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "loc").mkdir()
    (tmp_path / "loc" / ".bake").symlink_to(tmp_path / "elsewhere")
    fd = os.open(tmp_path / "loc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        planted = pytest.raises(nodefs.Planted, match=r"loc/\.bake is a symbolic link")
        with planted, nodefs.walked(fd, [".bake", "more"], f"{tmp_path}/loc", make=True):
            pass
    finally:
        os.close(fd)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_remove_tree_removes_a_link_itself_and_never_what_it_points_to(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept").write_bytes(b"kept")
    state = tmp_path / "state"
    (state / "partial.x").mkdir(parents=True)
    (state / "partial.x" / "0").write_bytes(b"half")
    (state / "partial.x" / "inner").symlink_to(victim)
    (state / "partial.y").symlink_to(victim)
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        nodefs.remove_tree(fd, "partial.x")
        nodefs.remove_tree(fd, "partial.y")
        nodefs.remove_tree(fd, "gone already")
    finally:
        os.close(fd)
    assert list(state.iterdir()) == [] and (victim / "kept").read_bytes() == b"kept"

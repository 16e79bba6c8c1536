"""bake/atomic.py: installs by staging, fsync and rename; stale staging files; the "no space" error."""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from bake.atomic import (
    STAGING_MARK,
    clear_stale_staging,
    commit,
    filesystem_bytes,
    free_bytes,
    is_no_space,
    link_new,
    no_space_as_error,
    staged,
    staging_path,
    write_file,
    write_new,
    write_together,
)
from bake.errors import NoSpaceError


def test_staging_paths_are_hidden_beside_the_target_and_never_repeat(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    first, second = staging_path(target), staging_path(target)
    assert first != second
    assert first.parent == target.parent
    assert first.name.startswith(f".model.bin{STAGING_MARK}{socket.gethostname()}.{os.getpid()}.")


def test_write_file_replaces_the_target_with_the_mode_asked_and_leaves_no_staging(tmp_path: Path) -> None:
    target = tmp_path / "SHA256SUMS"
    target.write_bytes(b"old")
    write_file(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["SHA256SUMS"]


def test_write_new_refuses_an_existing_name_and_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_new(path, b"first")
    with pytest.raises(FileExistsError):
        write_new(path, b"second")
    assert path.read_bytes() == b"first"


def test_staged_removes_what_was_not_committed(tmp_path: Path) -> None:
    target = tmp_path / "f"
    with pytest.raises(RuntimeError), staged(target) as staging:
        staging.write_bytes(b"partial")
        raise RuntimeError("the write failed")
    assert list(tmp_path.iterdir()) == []


def test_a_committed_staging_file_is_the_target(tmp_path: Path) -> None:
    target = tmp_path / "f"
    with staged(target) as staging:
        write_new(staging, b"bytes")
        commit(staging, target)
    assert [p.name for p in tmp_path.iterdir()] == ["f"] and target.read_bytes() == b"bytes"


def test_write_together_replaces_every_file(tmp_path: Path) -> None:
    files = {tmp_path / "SHA256SUMS": b"sums", tmp_path / "bake.lock.json": b"{}"}
    (tmp_path / "SHA256SUMS").write_bytes(b"old")
    write_together(files)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_clear_stale_staging_removes_only_what_a_dead_process_of_this_host_left(tmp_path: Path) -> None:
    target = tmp_path / "f"
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    host = socket.gethostname()
    left = {
        "dead": tmp_path / f".f{STAGING_MARK}{host}.{dead.stdout.strip()}.0",
        "alive": tmp_path / f".f{STAGING_MARK}{host}.{os.getpid()}.0",
        "other host": tmp_path / f".f{STAGING_MARK}another-host.{dead.stdout.strip()}.0",
        "other target": tmp_path / f".g{STAGING_MARK}{host}.{dead.stdout.strip()}.0",
    }
    for path in left.values():
        path.write_bytes(b"x")
    clear_stale_staging(target)
    assert sorted(name for name, path in left.items() if path.exists()) == [
        "alive",
        "other host",
        "other target",
    ]


def test_link_new_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "copy").write_bytes(b"verified")
    (tmp_path / "taken").write_bytes(b"the job's own")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert link_new("copy", "new", source_dir=fd, target_dir=fd) is True
        assert link_new("copy", "taken", source_dir=fd, target_dir=fd) is False
    finally:
        os.close(fd)
    assert (tmp_path / "new").read_bytes() == b"verified"
    assert (tmp_path / "taken").read_bytes() == b"the job's own"


@pytest.mark.parametrize(
    ("code", "full"), [(errno.ENOSPC, True), (errno.EDQUOT, True), (errno.EACCES, False)]
)
def test_is_no_space(code: int, full: bool) -> None:
    assert is_no_space(OSError(code, os.strerror(code))) is full


def test_a_full_disk_becomes_the_contracts_error_naming_who_where_and_what_to_do(tmp_path: Path) -> None:
    where = tmp_path / "dest" / "model.bin"
    asked: list[int] = []

    def need() -> int:  # asked only once the disk is full
        asked.append(1)
        return 2 * 1024 * 1024

    with (
        pytest.raises(NoSpaceError) as caught,
        no_space_as_error("asset 'm'", where, need, "free some space"),
    ):
        raise OSError(errno.ENOSPC, "No space left on device")
    message = str(caught.value)
    assert message.startswith(
        f"asset 'm': no space left on the device of {where}: need 2097152 bytes (2.0 MiB), "
    )
    assert message.endswith("bytes available; free some space") and asked == [1]


def test_other_errors_pass_through_unchanged(tmp_path: Path) -> None:
    with pytest.raises(PermissionError), no_space_as_error("asset 'm'", tmp_path / "f", 1, "do x"):
        raise PermissionError(errno.EACCES, "denied")


def test_free_and_filesystem_bytes_answer_for_a_path_not_yet_made(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "yet"
    st = os.statvfs(tmp_path)
    assert filesystem_bytes(missing) == st.f_blocks * st.f_frsize > 0
    assert 0 < free_bytes(missing) <= filesystem_bytes(missing)

"""Atomic installs (stage next to the target, fsync, rename, fsync the directory) and the "no space" error.

Every file bake puts in place (a fetched asset, the cache's progress records,
SHA256SUMS and bake.lock.json) goes through a staging file in the target's own
directory, so the rename is atomic even when the source is on another
filesystem. Staging files share one name scheme,
``.<name>.bake-staging.<host>.<pid>.<n>``, so a later run can tell which ones a
killed process left behind. Node storage (``bake seed``) gets the other install: a
verified copy enters by a hard link (``link_new``), which never replaces a name, after one
``sync_filesystem`` for all the copies.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from bake.byte_sizes import MIB
from bake.errors import NoSpaceError

STAGING_MARK = ".bake-staging."
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk and a full quota read the same to a user
_counter = itertools.count()


def is_no_space(exc: OSError) -> bool:
    """Return whether ``exc`` means the disk (or the user's quota) is full."""
    return exc.errno in _NO_SPACE


def _statvfs(path: Path) -> os.statvfs_result | None:
    """statvfs of the filesystem of ``path``, or of its nearest parent that exists; None if none answers."""
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            return os.statvfs(candidate)
    return None


def free_bytes(path: Path) -> int:
    """Return the bytes available to this user on the filesystem of ``path`` (or its nearest parent)."""
    st = _statvfs(path)
    return st.f_bavail * st.f_frsize if st else 0


def filesystem_bytes(path: Path) -> int:
    """Return the size of the filesystem of ``path`` (or its nearest parent), 0 if none answers."""
    st = _statvfs(path)
    return st.f_blocks * st.f_frsize if st else 0


def free_inodes(path: Path) -> int | None:
    """Return the files this user may still create on the filesystem of ``path``; None if it does not say."""
    st = _statvfs(path)
    return st.f_favail if st and st.f_files else None  # some filesystems report no inode counts


def no_space_error(subject: str, where: Path, need: int, what_to_do: str) -> NoSpaceError:
    """Return the contract's "no space" error: who, where, how much is needed and available, what to do.

    A filesystem out of inodes refuses new files with bytes to spare: the message says so.
    """
    if free_inodes(where.parent) == 0:
        return NoSpaceError(
            f"{subject}: no free inodes left on the device of {where} (no new file can be made there, "
            f"{free_bytes(where.parent)} bytes free); {what_to_do}"
        )
    return NoSpaceError(
        f"{subject}: no space left on the device of {where}: need {need} bytes "
        f"({need / MIB:.1f} MiB), {free_bytes(where.parent)} bytes available; {what_to_do}"
    )


class no_space_as_error:
    """Turn a full disk (or quota) inside the ``with`` block into ``no_space_error``; others pass through.

    ``need`` may be a callable, asked only when the disk is full.
    """

    __slots__ = ("need", "subject", "what_to_do", "where")

    def __init__(self, subject: str, where: Path, need: int | Callable[[], int], what_to_do: str) -> None:
        self.subject, self.where, self.need, self.what_to_do = subject, where, need, what_to_do

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, OSError) and is_no_space(exc):
            need = self.need() if callable(self.need) else self.need
            raise no_space_error(self.subject, self.where, need, self.what_to_do) from None


def staging_path(target: Path) -> Path:
    """Return a fresh staging name next to ``target``, unique across threads, processes and hosts."""
    return target.with_name(
        f".{target.name}{STAGING_MARK}{socket.gethostname()}.{os.getpid()}.{next(_counter)}"
    )


def clear_stale_staging(target: Path) -> None:
    """Remove staging files for ``target`` left by a process of this host that no longer exists (SIGKILL)."""
    prefix = f".{target.name}{STAGING_MARK}"
    host = socket.gethostname()
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(target.parent):
            if not entry.name.startswith(prefix):
                continue
            owner, _, pid = entry.name[len(prefix) :].rpartition(".")[0].rpartition(".")
            if owner == host and pid.isascii() and pid.isdigit() and not _pid_alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by path."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged(target: Path) -> Iterator[Path]:
    """Yield a staging path next to ``target``; it is removed on the way out unless it was renamed."""
    staging = staging_path(target)
    try:
        yield staging
    finally:
        # Only what was made: on a read-only filesystem even unlinking a missing name fails (EROFS).
        if os.path.lexists(staging):
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()


def commit(staging: Path, target: Path, *, durable: bool = True) -> None:
    """Rename ``staging`` over ``target``; when ``durable``, fsync the file first and the directory after."""
    if durable:
        fsync_path(staging)
    os.replace(staging, target)
    if durable:
        fsync_path(target.parent)


def write_file(target: Path, data: bytes, *, durable: bool = True, mode: int = 0o644) -> None:
    """Replace ``target`` with ``data`` atomically: a reader sees the old file or the new, never a torn one.

    Raises OSError as the write or rename raised it (see ``is_no_space``).
    """
    with staged(target) as staging:
        write_new(staging, data, mode)
        commit(staging, target, durable=durable)


def write_together(files: dict[Path, bytes]) -> None:
    """Replace several files in one directory: all are staged and fsynced before any is renamed.

    Either every target is replaced or none is (short of a crash between renames).
    Raises OSError as the writes raised it.
    """
    with contextlib.ExitStack() as stack:
        staged_files = {target: stack.enter_context(staged(target)) for target in files}
        for target, staging in staged_files.items():
            write_new(staging, files[target])
            fsync_path(staging)
        for target, staging in staged_files.items():
            os.replace(staging, target)
    fsync_path(next(iter(files)).parent)


def write_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Create ``path`` (which must not exist) holding ``data``, with ``mode`` (0644 by default)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask: the index is read by other users of the image
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def link_new(source: str, target: str, *, source_dir: int, target_dir: int) -> bool:
    """Install the file ``source`` (complete and synced) at ``target`` by a hard link, which never replaces.

    Names are relative to the directory descriptors ``source_dir`` and ``target_dir``. Returns True
    when linked, False when something is already at ``target`` (left as it is). Raises OSError else
    (see ``is_no_space``)."""
    try:
        os.link(source, target, src_dir_fd=source_dir, dst_dir_fd=target_dir, follow_symlinks=False)
    except FileExistsError:
        return False
    return True


def sync_filesystem(fd: int) -> None:
    """Write everything cached for the filesystem ``fd`` is on to its disk, in one call (syncfs(2)).

    A copy of many files syncs once instead of once per file; where libc has no syncfs, every
    filesystem is synced (sync(2)). Raises OSError when syncfs fails (EIO, ENOSPC)."""
    import ctypes  # only a copier needs it

    libc = ctypes.CDLL(None, use_errno=True)
    syncfs = getattr(libc, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    if syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))

"""Node storage, never through a link: names reached from directory descriptors, bake's own made new.

Every name under a node-storage location is reached from the location's directory descriptor one
component at a time, with O_NOFOLLOW. Something planted where bake makes or reads a name (a link,
a FIFO, a device, a socket) is named in a message and left alone: a link followed would write
elsewhere, a FIFO opened would block. A file that may be planted (the lock, another copier's
beat) is opened O_PATH first, which opens nothing, and reopened through /proc/self/fd only once
fstat shows a regular file, so that the file checked is the file opened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
)


class Planted(Exception):
    """Something other than what bake makes, at a name bake makes or reads: never followed or opened."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path} is {kind}")
        self.path, self.kind = path, kind


class Unwritable(Exception):
    """Node storage this process cannot write: a name bake needs could not be made there."""

    def __init__(self, what: str, exc: OSError) -> None:
        super().__init__(f"{what}: {exc.strerror or exc}")
        self.errno = exc.errno


def kind(mode: int) -> str:
    """What a file of ``mode`` is, as a message names it ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "something else")


def lstat(dir_fd: int, name: str) -> os.stat_result | None:
    """``name`` in ``dir_fd`` as it is, never followed; None when nothing is there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def kind_at(dir_fd: int, name: str) -> str:
    """What is at ``name`` in ``dir_fd``, never followed ("nothing" when nothing is there)."""
    st = lstat(dir_fd, name)
    return "nothing" if st is None else kind(st.st_mode)


def open_dir(dir_fd: int, name: str, path: str) -> int:
    """Open the directory ``name`` in ``dir_fd`` (``path`` names it in messages), never through a link.

    Raises FileNotFoundError when nothing is there, Planted when something else is."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Planted(path, kind_at(dir_fd, name)) from None
        raise


def make_dir(dir_fd: int, name: str, path: str) -> int:
    """Open the directory ``name`` in ``dir_fd``, made first when nothing is there (as ``mkdir``: 0777
    less the umask). mkdir makes a new entry and never follows a link at its name; a directory a job
    beside this one made at the same moment is no failure. Raises Planted, or Unwritable."""
    try:
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise Unwritable(f"cannot make the directory {path}", exc) from None
    try:
        return open_dir(dir_fd, name, path)
    except FileNotFoundError as exc:  # removed between the two calls: nothing bake can stand on
        raise Unwritable(f"cannot open the directory {path}", exc) from None


@contextlib.contextmanager
def walked(root_fd: int, parts: list[str], root: str, *, make: bool = False) -> Iterator[int]:
    """A descriptor of the directory ``parts`` below ``root_fd`` (named ``root`` in messages), each
    component opened (or, with ``make``, made) without following a link; closed afterwards.
    Raises FileNotFoundError (without ``make``), Planted or Unwritable."""
    fd = os.dup(root_fd)
    path = root
    try:
        for part in parts:
            path = f"{path}/{part}"
            step = make_dir(fd, part, path) if make else open_dir(fd, part, path)
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


def open_regular(dir_fd: int, name: str, path: str, flags: int) -> int:
    """Open the regular file ``name`` in ``dir_fd`` with ``flags``: never a link, FIFO or device.

    Raises FileNotFoundError when nothing is there, Planted when something else is, OSError as
    the open does (EACCES)."""
    probe = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        seen = os.fstat(probe)
        if not stat.S_ISREG(seen.st_mode):
            raise Planted(path, kind(seen.st_mode))
        try:
            return os.open(f"/proc/self/fd/{probe}", flags | os.O_CLOEXEC)
        except FileNotFoundError:
            pass  # no /proc: open it by name, and make sure it is the file just looked at
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd)
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
            os.close(fd)
            raise Planted(path, "something that changed while bake looked at it")
        os.set_blocking(fd, True)
        return fd
    finally:
        os.close(probe)


def remove_tree(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd`` and, when it is a directory, all it holds, never through a link
    (a link is removed itself). Whatever is gone already is no failure; other errors propagate."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        return
    try:
        for entry in os.listdir(fd):
            st = lstat(fd, entry)
            if st is not None and stat.S_ISDIR(st.st_mode):
                remove_tree(fd, entry)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(name, dir_fd=dir_fd)

"""Putting a verified cache object at its destination: a staging file next to the target, fsync, rename.

Each destination gets a file of its own, never a hard link to the cache's object: an edit in one
``--dest`` must never show in another, nor in the cache (root ignores a read-only mode, so only
separate files keep them apart). Where the filesystem shares extents (a reflink: btrfs, XFS) the
copy costs no space; elsewhere it is an in-kernel copy. A target's
directories are made only when its file is ready to go in, and a run that fails takes back
the ones it made that stayed empty, so a failed fetch leaves ``--dest`` as it found it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import threading
from pathlib import Path, PurePosixPath

from bake import atomic
from bake.asset import Asset
from bake.errors import FetchError, UsageError
from bake.fetch.failures import NO_SPACE_ADVICE
from bake.hashes import file_matches

log = logging.getLogger(__name__)

# ioctl(FICLONE) from <linux/fs.h>: the destination shares the source's extents, copy-on-write.
_FICLONE = 0x40049409
# What a filesystem or a pair of them answers when it cannot clone: then the bytes are copied.
_NO_CLONE = (errno.EXDEV, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOTTY, errno.EPERM, errno.ENOSYS)


class DestDirs:
    """The directories this run made under (and for) ``--dest``, so that a failed run can take them back."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.made: list[Path] = []
        self.lock = threading.Lock()  # jobs make directories from several threads

    def make(self, directory: Path) -> None:
        """``mkdir -p directory``, noting each level it created. Raises OSError as mkdir does."""
        missing = []
        while not os.path.lexists(directory):
            missing.append(directory)
            directory = directory.parent
        for level in reversed(missing):
            try:
                level.mkdir()
            except FileExistsError:
                continue  # another job (or process) made it first: not ours to take back
            with self.lock:
                self.made.append(level)

    def take_back(self) -> None:
        """Remove the directories this run made that are still empty, deepest first."""
        with self.lock:
            made, self.made = self.made, []
        for directory in reversed(made):
            try:
                directory.rmdir()
            except OSError:
                pass  # it holds something now (a verified asset, another run's file): it stays

    def make_for(self, target: Path, asset: Asset) -> None:
        """Make ``target``'s directory; refuse one a symlink in --dest carries outside (FetchError)."""
        check_inside(self.dest, target, asset)
        try:
            self.make(target.parent)
        except OSError as exc:
            raise FetchError(
                f"asset {asset.name!r}: cannot create {target.parent}: {exc.strerror or exc}; check --dest"
            ) from None
        check_inside(self.dest, target, asset)  # a link planted while we made the directories


def make_dest(dirs: DestDirs) -> None:
    """Make ``dirs.dest`` a directory. Raises UsageError naming what stands in the way (exit 2).

    A link that leads nowhere, a loop of links, a file on the way: each is
    named, with what to do, before any traffic.
    """
    dest = dirs.dest
    try:
        with atomic.no_space_as_error(f"--dest {dest}", dest, 0, NO_SPACE_ADVICE):
            dirs.make(dest)
            os.stat(dest)  # a dangling link or a loop of links says so here
        if dest.is_dir():
            if os.access(dest, os.W_OK):
                return
            # Found here, not at the first install: a read-only --dest and its read-only parent read alike.
            raise UsageError(
                f"--dest {dest}: cannot write into it (permissions, or a read-only filesystem); "
                "point --dest at a writable directory"
            )
        reason = "not a directory"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    if dest.is_symlink():
        target = os.readlink(dest)
        raise UsageError(
            f"--dest {dest} is a link to {target}, which is no directory ({reason}); "
            f"create {target}, or point --dest at a directory"
        )
    blocker = next((p for p in (dest, *dest.parents) if os.path.lexists(p) and not p.is_dir()), None)
    if blocker is not None:
        raise UsageError(f"--dest {dest}: {blocker} is not a directory; point --dest at a directory")
    raise UsageError(f"--dest {dest}: cannot create it ({reason}); point --dest at a writable directory")


def check_inside(dest: Path, target: Path, asset: Asset) -> None:
    """Raise FetchError when a symlink under ``dest`` would carry ``target`` outside it."""
    root = os.path.realpath(dest)
    parent = os.path.realpath(target.parent)
    if parent != root and not parent.startswith(root + os.sep):
        raise FetchError(
            f"asset {asset.name!r}: {target} would land in {parent}, outside --dest {root}, "
            "through a symlink; remove that link from the destination"
        )


def target_path(dest: Path, asset: Asset) -> Path:
    """Return the asset's path under ``dest``; refuses one a symlink carries outside. Makes nothing."""
    target = dest.joinpath(*PurePosixPath(asset.path).parts)
    check_inside(dest, target, asset)
    return target


def already_installed(target: Path, asset: Asset) -> bool:
    """Return whether ``target`` is a regular file with the asset's size and sha256; log why not."""
    try:
        st = target.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        log.warning("%s: %s is not a regular file; replacing it", asset.name, target)
        return False
    if asset.size is not None and st.st_size != asset.size:
        log.warning(
            "%s: %s has %d bytes, expected %d; replacing it", asset.name, target, st.st_size, asset.size
        )
        return False
    if file_matches(target, asset.sha256):
        return True
    log.warning("%s: %s does not match sha256 %s; replacing it", asset.name, target, asset.sha256)
    return False


def install(obj: Path, target: Path, asset: Asset, dirs: DestDirs, *, verify: bool) -> bool:
    """Put ``obj`` at ``target`` through a staging file next to it: (verify,) fsync, rename, fsync the dir.

    Returns False, leaving nothing behind, when ``verify`` finds a mismatch.
    Raises NoSpaceError when the disk is full, FetchError for other failures.
    """
    dirs.make_for(target, asset)
    atomic.clear_stale_staging(target)
    try:
        with (
            atomic.no_space_as_error(
                f"asset {asset.name!r}", target, lambda: obj.stat().st_size, NO_SPACE_ADVICE
            ),
            atomic.staged(target) as staging,
        ):
            _copy(obj, staging)
            if verify and not file_matches(staging, asset.sha256):
                return False
            atomic.commit(staging, target)
            return True
    except OSError as exc:
        raise FetchError(
            f"asset {asset.name!r}: cannot install {target}: {exc.strerror or exc}; "
            "check that --dest is writable and the path is not a directory"
        ) from None


def _copy(src: Path, dst: Path) -> None:
    """Make ``dst`` a new file of ``src``'s bytes: a clone where the filesystem can, else a copy."""
    with open(src, "rb") as fin:
        size = os.fstat(fin.fileno()).st_size
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                fcntl.ioctl(fd, _FICLONE, fin.fileno())
                return
            except OSError as exc:
                if exc.errno not in _NO_CLONE:
                    raise
            if size:
                os.posix_fallocate(fd, 0, size)  # ENOSPC now, not half-way through
            offset = 0
            while offset < size:  # in-kernel copy
                offset += os.sendfile(fd, fin.fileno(), offset, size - offset)
        finally:
            os.close(fd)

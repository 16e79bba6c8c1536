"""Editing a manifest in place: a symlink's target, under a lock, re-read inside it, replaced atomically.

``bake add`` fetches first (which may take minutes) and edits after, so two adds into one
manifest overlap. The edit is short and serialised: each takes the lock, reads the manifest
as it is now (with the other add's entry, if that one finished first), appends, and
replaces the file by a rename. The lock is a flock on the manifest's directory: a lock
on the file itself would be left behind on the old inode by the rename, and a lock file
would be one more file in the user's repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from bake import atomic
from bake.errors import UsageError

LOCK_WAIT = 60.0  # seconds; another add holds the lock for a read and a write, not for its download


def target_of(path: Path) -> Path:
    """The file an edit of ``path`` must change: the target of a symlink (at any depth), else ``path``."""
    return Path(os.path.realpath(path))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[Path]:
    """Hold the edit lock of manifest ``path``; yields the file to read and replace (a link's target).

    Raises UsageError when the directory cannot be locked, or another edit holds it past LOCK_WAIT.
    """
    target = target_of(path)
    try:
        fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UsageError(
            f"--manifest {path}: cannot open its directory {target.parent}: {exc.strerror}"
        ) from None
    try:
        give_up = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > give_up:
                    raise UsageError(
                        f"--manifest {path}: another bake add has held the lock on {target.parent} for "
                        f"{LOCK_WAIT:g} s; let it finish (or stop it), then run this again"
                    ) from None
                time.sleep(0.02)
        yield target
    finally:
        os.close(fd)


def check_writable(path: Path) -> None:
    """Refuse, before any download, a manifest whose edit could not land: the edit is a new file and a
    rename in the directory of the file it changes (a link's target), which must exist and be writable.

    Raises UsageError naming the manifest, the directory and what to do.
    """
    folder = target_of(path).parent
    if not folder.is_dir():
        problem = "does not exist"
    elif not os.access(folder, os.W_OK | os.X_OK):
        problem = "cannot be written (permissions, or a read-only filesystem)"
    else:
        return
    raise UsageError(
        f"--manifest {path}: its directory {folder} {problem}, and the edit is a new file and a rename "
        "there: fix that, or edit a copy elsewhere with --manifest; nothing was fetched"
    )


def appended(text: str, entry: str) -> str:
    """``text`` with ``entry`` after it, one blank line between them (none before the first entry)."""
    separator = "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
    return text + separator + entry


def replace(target: Path, text: str) -> None:
    """Replace ``target`` with ``text`` by a rename, keeping its mode (0644 for a new file).

    Raises UsageError (nothing written) when its directory cannot take the staging file or the rename.
    """
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
    try:
        atomic.write_file(target, text.encode("utf-8"), mode=mode)
    except OSError as exc:
        raise UsageError(
            f"--manifest {target}: cannot write it ({exc.strerror or exc}); the edit is a new file and a "
            f"rename in {target.parent}, so that directory must be writable: fix that, or edit a copy "
            "elsewhere with --manifest; nothing was written"
        ) from None

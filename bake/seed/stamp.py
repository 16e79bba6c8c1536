"""The stamp that proves a copied location served on later starts, with no process (docs/SERVE_FORMAT.md).

``STATE/served.<DIGEST>.copied``: the asset directory's path, then one line per directory of
the served tree as ``stat -c '%i %y %z'`` prints it (inode, mtime and ctime to the nanosecond, in
the local time zone), recorded just before the proof. The entrypoint reads it and runs that one
``stat``: the lines written here must be the lines GNU and busybox stat print, byte for byte
(tests/seed/test_stamp.py checks them against both).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time

from bake.seed import nodefs


def _time(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    local = time.localtime(seconds)
    return time.strftime("%Y-%m-%d %H:%M:%S", local) + f".{fraction:09d} " + time.strftime("%z", local)


def stat_line(st: os.stat_result) -> str:
    """One directory as ``stat -c '%i %y %z'`` prints it."""
    return f"{st.st_ino} {_time(st.st_mtime_ns)} {_time(st.st_ctime_ns)}"


def dir_lines(loc_fd: int, where: str, dirs: tuple[str, ...]) -> list[str] | None:
    """Each of ``dirs`` (``.`` or plain paths in the location), as stat sees it now; None when one is
    missing or no directory."""
    lines = []
    for path in dirs:
        if path == ".":
            st = os.fstat(loc_fd)
        else:
            parent, _, base = path.rpartition("/")
            try:
                with nodefs.walked(loc_fd, parent.split("/") if parent else [], where) as fd:
                    st = nodefs.lstat(fd, base)
            except (FileNotFoundError, nodefs.Planted):
                return None
        if st is None or not stat.S_ISDIR(st.st_mode):
            return None
        lines.append(stat_line(st))
    return lines


def write(state_fd: int, digest: str, assets: str, lines: list[str]) -> None:
    """Put the stamp in place (a new file, renamed over an earlier stamp only when that is a regular file)."""
    name = f"served.{digest}.copied"
    st = nodefs.lstat(state_fd, name)
    if st is not None and not stat.S_ISREG(st.st_mode):
        return  # something planted at the stamp's name: left alone, and the location proved every start
    temp = f".served.{os.getpid()}.{time.monotonic_ns()}"
    try:
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=state_fd
        )
    except OSError:
        return  # no stamp: the next start proves the location again
    try:
        os.fchmod(fd, 0o644)  # every job's user reads it, whatever the umask
        os.write(fd, "".join(f"{line}\n" for line in [assets, *lines]).encode())
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=state_fd)
        return
    os.close(fd)
    try:
        os.rename(temp, name, src_dir_fd=state_fd, dst_dir_fd=state_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=state_fd)

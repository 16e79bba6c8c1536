"""Who is alive: a copier's partial and heartbeat, and a judge's watch of everyone's partials.

A copier copies into a partial of its own, ``STATE/partial.<host>.<pid>.<random>``, which no
other process on any node ever names. A thread of the copier's own process writes a new count
into the partial's ``beat`` file every ``BEAT_S``, so the heartbeat ends with the copier,
whatever signal ends it. A judge (any job waiting, or taking over) reads each partial's beat on
every poll; a partial whose beat it saw unchanged for ``STALE_S`` is dead (or stopped), and only
then may it be removed. The time is the judge's own monotonic clock, never a wall clock and never
another machine's: and each poll counts at most ``MAX_STEP_S``, so that time the judge itself did
not run (stopped, starved, its NFS call hanging) counts as no observation at all.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import stat
import threading
import time

from bake.seed import nodefs

STALE_S = 30.0  # a partial whose beat stood still this long, as one judge watched it, is a dead copier's
BEAT_S = 1.0
POLL_S = 0.2
MAX_STEP_S = 1.0
PARTIAL = "partial."
CLAIM = "copying"  # the right to copy where flock fails, or after a take-over (bake.seed.right)


def unique(prefix: str) -> str:
    """A name no other process, on this node or another, makes: ``PREFIX<host>.<pid>.<random>``."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return f"{prefix}{host}.{os.getpid()}.{secrets.token_hex(4)}"


class Partial:
    """This copier's partial directory in bake's state directory: the copies (named by number) and the
    beat. ``make`` creates it; ``remove`` removes it while it is still this copier's."""

    def __init__(self, state_fd: int, where: str) -> None:
        self.state_fd, self.name = state_fd, unique(PARTIAL)
        self.path = f"{where}/{self.name}"
        try:
            os.mkdir(self.name, 0o700, dir_fd=state_fd)
        except OSError as exc:
            raise nodefs.Unwritable(f"cannot make the partial directory {self.path}", exc) from None
        self.fd = nodefs.open_dir(state_fd, self.name, self.path)
        self.ino = os.fstat(self.fd).st_ino
        self.beat_fd = os.open(
            "beat", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=self.fd
        )

    def mine(self) -> bool:
        """Whether the partial is still at its name: a judge that found it dead has taken it away."""
        st = nodefs.lstat(self.state_fd, self.name)
        return st is not None and stat.S_ISDIR(st.st_mode) and st.st_ino == self.ino

    def remove(self) -> None:
        """Remove the partial and what it holds, if it is still this copier's; close it."""
        for fd in (self.beat_fd, self.fd):
            os.close(fd)
        if self.mine():
            nodefs.remove_tree(self.state_fd, self.name)


class Beat:
    """The copier's heartbeat, a daemon thread: a new ``COUNT BYTES`` line in the partial's beat file
    every BEAT_S. It notes when the partial was taken away (``taken_over``), and the longest time this
    process did not run between two beats (``stood``, what a judge saw as no progress)."""

    def __init__(self, partial: Partial) -> None:
        self.partial = partial
        self.copied = 0  # bytes copied so far, written into each beat
        self.stood = 0.0
        self.taken_over = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bake-seed-beat", daemon=True)

    def __enter__(self) -> Beat:
        self._write(0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _write(self, count: int) -> None:
        try:
            os.pwrite(self.partial.beat_fd, b"%d %d\n" % (count, self.copied), 0)
        except OSError:
            pass  # a full or failing disk: the copy itself will say so

    def _run(self) -> None:
        count, last = 0, time.monotonic()
        while not self._stop.wait(BEAT_S):
            now = time.monotonic()
            self.stood, last = max(self.stood, now - last), now
            count += 1
            self._write(count)
            if not self.partial.mine():
                self.taken_over.set()
                return


class Watch:
    """A judge's view of the partials in one state directory, polled: how long each stood still, and
    how long nothing anywhere made progress (``quiet``), on this process's monotonic clock."""

    def __init__(self, state_fd: int, where: str) -> None:
        self.state_fd, self.where = state_fd, where
        self.seen: dict[str, tuple[object, float]] = {}  # name -> (its last signature, how long it stood)
        self.claim: int | None = None  # the inode of the claim ``copying`` last seen, or None
        self.quiet = 0.0
        self._last = time.monotonic()

    def poll(self) -> None:
        """Read every partial's beat once; a new partial, or a changed beat, is progress."""
        now = time.monotonic()
        step, self._last = min(now - self._last, MAX_STEP_S), now
        seen, moved = {}, False
        for name in os.listdir(self.state_fd):
            if not name.startswith(PARTIAL):
                continue
            signature = self._signature(name)
            before = self.seen.get(name)
            if before is None or before[0] != signature:
                seen[name], moved = (signature, 0.0), True
            else:
                seen[name] = (signature, before[1] + step)
        self.seen = seen
        claim = nodefs.lstat(self.state_fd, CLAIM)
        if (claim.st_ino if claim else None) != self.claim:
            self.claim, moved = (claim.st_ino if claim else None), moved or claim is not None
        self.quiet = 0.0 if moved else self.quiet + step

    def stale(self) -> list[str]:
        """The partials this judge saw stand still for STALE_S."""
        return [name for name, (_, stood) in self.seen.items() if stood >= STALE_S]

    def reclaim(self, name: str) -> bool:
        """Remove a stale partial: moved aside first (one judge wins the rename), then removed whole.
        Returns whether this judge removed it."""
        aside = unique("stale.")
        try:
            os.rename(name, aside, src_dir_fd=self.state_fd, dst_dir_fd=self.state_fd)
        except FileNotFoundError:
            return False
        nodefs.remove_tree(self.state_fd, aside)
        self.seen.pop(name, None)
        return True

    def _signature(self, name: str) -> object:
        """What changes when the partial's copier is alive: its directory's identity and its beat."""
        try:
            fd = nodefs.open_dir(self.state_fd, name, f"{self.where}/{name}")
        except (FileNotFoundError, nodefs.Planted):
            st = nodefs.lstat(self.state_fd, name)
            return ("not a partial", st.st_ino if st else None)
        try:
            beat = nodefs.open_regular(fd, "beat", f"{self.where}/{name}/beat", os.O_RDONLY)
        except (OSError, nodefs.Planted):
            return (os.fstat(fd).st_ino, None)
        finally:
            os.close(fd)
        try:
            return (os.fstat(beat).st_ino, os.read(beat, 64))
        finally:
            os.close(beat)

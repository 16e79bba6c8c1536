"""Segmented transfers: byte ranges done and to do, claims connections fill and split, the prefix hash."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import socket
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from bake.errors import DownloadError

if TYPE_CHECKING:
    from bake.fetch import _Job

MIB = 1 << 20
READ_BUF = 256 * 1024  # one read from the network, one pwrite
PROBE = 4 * MIB  # first ranged request when the size is not known yet
_MIN_PIECE = 1 * MIB
_MAX_PIECE = 64 * MIB
_STEAL_MIN = 4 * READ_BUF  # split a busy range only if both halves outlast an in-flight read ...
_STEAL_AFTER = 0.5  # ... and it would take its connection this many seconds more; else it ends soon anyway
HASH_BLOCK = 4 * MIB


class Changed(DownloadError):
    """The file behind a source changed (or the partial is inconsistent): start it over."""


class Aborted(Exception):
    """Another thread of the same transfer failed; this one stops quietly."""


def piece_size(size: int | None, connections: int) -> int:
    if size is None:
        return PROBE
    if connections == 1:
        return max(size, 1)
    # About four pieces per connection: the hashed prefix follows closely, and
    # work stealing evens out the end.
    return max(_MIN_PIECE, min(_MAX_PIECE, size // (connections * 4)))


class Ranges:
    """Sorted, merged, half-open byte ranges [start, end)."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.spans: list[tuple[int, int]] = []
        for start, end in ranges:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        spans = self.spans
        # Fast path: the chunk extends a span (the common case, once per read).
        for i, (a, b) in enumerate(spans):
            if b == start and (i + 1 == len(spans) or spans[i + 1][0] > end):
                spans[i] = (a, end)
                return
        kept = []
        for a, b in spans:
            if b < start or a > end:
                kept.append((a, b))
            else:
                start, end = min(a, start), max(b, end)
        kept.append((start, end))
        kept.sort()
        self.spans = kept

    def prefix(self) -> int:
        return self.spans[0][1] if self.spans and self.spans[0][0] == 0 else 0

    def total(self) -> int:
        return sum(b - a for a, b in self.spans)

    def holes(self, size: int) -> list[tuple[int, int]]:
        out, pos = [], 0
        for a, b in self.spans:
            if a > pos:
                out.append((pos, min(a, size)))
            pos = max(pos, b)
        if pos < size:
            out.append((pos, size))
        return [(a, b) for a, b in out if a < b]


class Claim:
    """A byte range one connection is filling; another may steal its tail by lowering ``end``."""

    __slots__ = ("end", "pos", "start", "t0")

    def __init__(self, pos: int, end: int | None) -> None:
        self.start = self.pos = pos
        self.end = end
        self.t0 = time.monotonic()

    def seconds_left(self) -> float | None:
        """Time to finish at the rate so far; None while too early to tell."""
        elapsed = time.monotonic() - self.t0
        if elapsed < 0.05 or self.pos == self.start:
            return None
        return (self.end - self.pos) * elapsed / (self.pos - self.start)


LATER = Claim(0, 0)  # claim() answer: nothing to take yet, ask again shortly


class PrefixHasher:
    """SHA-256 of the file's contiguous completed prefix, read back from the page cache as it grows."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.pos = 0

    def catch_up(self, fd: int, upto: int, limit: int | None = None) -> None:
        stop = upto if limit is None else min(upto, self.pos + limit)
        while self.pos < stop:
            block = os.pread(fd, min(HASH_BLOCK, stop - self.pos), self.pos)
            if not block:
                raise Changed("the partial file is shorter than its progress record; starting it over")
            self.sha.update(block)
            self.pos += len(block)


class Transfer:
    """One attempt at one source: the ranges still unclaimed, the claims in flight, and how to stop them."""

    def __init__(self, job: _Job) -> None:
        self.job = job
        self.lock = job.lock
        self.size: int | None = None
        self.piece = PROBE
        self.url = ""
        self.etag: str | None = None
        self.unclaimed: list[tuple[int, int]] = []
        self.active: set[Claim] = set()
        self.abort = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None
        self.conns: set[http.client.HTTPConnection] = set()

    def plan(self, size: int, first: Claim, connections: int) -> None:
        """Queue every hole of the partial except what ``first`` already covers."""
        with self.lock:
            self.size = size
            self.piece = piece_size(size, connections)
            holes = self.job.done.holes(size)
            self.unclaimed = []
            for a, b in holes:
                if b <= first.pos or a >= first.end:
                    self.unclaimed.append((a, b))
                else:
                    if a < first.pos:
                        self.unclaimed.append((a, first.pos))
                    if b > first.end:
                        self.unclaimed.append((first.end, b))
            self.active.add(first)

    def pending_pieces(self) -> int:
        with self.lock:
            return sum(-(-(b - a) // self.piece) for a, b in self.unclaimed)

    def claim(self) -> Claim | None:
        """Take the lowest unclaimed piece, else split the slowest-to-finish range in flight.

        Returns None when there is nothing left worth a new request, LATER
        when a range in flight has not shown its rate yet.
        """
        with self.lock:
            if self.abort.is_set():
                return None
            if self.unclaimed:
                a, b = self.unclaimed[0]
                end = min(b, a + self.piece)
                if end == b:
                    self.unclaimed.pop(0)
                else:
                    self.unclaimed[0] = (end, b)
                claim = Claim(a, end)
            else:
                victim = max(self.active, key=lambda c: c.end - c.pos, default=None)
                if victim is None or victim.end - victim.pos < _STEAL_MIN:
                    return None
                left = victim.seconds_left()
                if left is None:
                    return LATER
                if left < _STEAL_AFTER:
                    return None
                mid = victim.pos + (victim.end - victim.pos) // 2
                claim = Claim(mid, victim.end)
                victim.end = mid
            self.active.add(claim)
            return claim

    def release(self, claim: Claim) -> None:
        with self.lock:
            self.active.discard(claim)

    def fail(self, exc: BaseException) -> None:
        """Record the first real error and stop every connection of this transfer."""
        with self.lock:
            if self.error is None and not isinstance(exc, Aborted):
                self.error = exc
            conns = list(self.conns)
        self.abort.set()
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

"""Range bookkeeping for segmented transfers: byte ranges on disk, claims in flight, and the piece queue.

Nothing here does I/O; the queue's callers hand in the lock that guards it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from bake.byte_sizes import MIB

READ_BUF = 256 * 1024  # one read from the network, one pwrite
PROBE = 4 * MIB  # first ranged request when the size is not known yet
_MIN_PIECE = 1 * MIB
_MAX_PIECE = 64 * MIB
_STEAL_MIN = 4 * READ_BUF  # split a busy range only if both halves outlast an in-flight read ...
_STEAL_AFTER = 0.5  # ... and it would take its connection this many seconds more; else it ends soon anyway


def piece_size(size: int | None, connections: int) -> int:
    """Return the bytes one request of a segmented transfer asks for."""
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
        """Return where the contiguous run of bytes from offset 0 ends."""
        return self.spans[0][1] if self.spans and self.spans[0][0] == 0 else 0

    def total(self) -> int:
        return sum(b - a for a, b in self.spans)

    def holes(self, size: int) -> list[tuple[int, int]]:
        """Return the ranges of [0, size) not covered, in order."""
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


class NotYet:
    """The answer of ``ClaimQueue.take`` when a range in flight has not shown its rate yet: ask again soon."""


NOT_YET = NotYet()


class ClaimQueue:
    """The pieces of one transfer not yet asked for, and the claims in flight that may be split.

    ``lock`` guards ``unclaimed``, ``active`` and every active claim's ``pos``
    and ``end``; it is the partial file's lock, because a claim's ``pos`` moves
    together with the ranges written.
    """

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.piece = PROBE
        self.unclaimed: list[tuple[int, int]] = []
        self.active: set[Claim] = set()

    def plan(self, holes: list[tuple[int, int]], first: Claim, piece: int) -> None:
        """Queue every hole except what ``first`` already covers, in pieces of ``piece`` bytes."""
        with self.lock:
            self.piece = piece
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

    def take(self) -> Claim | NotYet | None:
        """Take the lowest unclaimed piece, else split the slowest-to-finish range in flight.

        Returns None when there is nothing left worth a new request, NOT_YET
        when a range in flight has not shown its rate yet.
        """
        with self.lock:
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
                    return NOT_YET
                if left < _STEAL_AFTER:
                    return None
                mid = victim.pos + (victim.end - victim.pos) // 2
                claim = Claim(mid, victim.end)
                victim.end = mid
            self.active.add(claim)
            return claim

    def add(self, claim: Claim) -> None:
        with self.lock:
            self.active.add(claim)

    def release(self, claim: Claim) -> None:
        with self.lock:
            self.active.discard(claim)

"""Range bookkeeping, the piece size, and how the claim queue hands out and steals pieces."""

from __future__ import annotations

import threading
import time

import pytest

from bake.byte_sizes import MIB
from bake.fetch.segments import NOT_YET, PROBE, READ_BUF, Claim, ClaimQueue, NotYet, Ranges, piece_size


@pytest.mark.parametrize(
    ("added", "spans"),
    [
        ([], []),
        ([(0, 10)], [(0, 10)]),
        ([(0, 10), (10, 20)], [(0, 20)]),  # touching spans merge
        ([(10, 20), (0, 10)], [(0, 20)]),
        ([(0, 10), (20, 30)], [(0, 10), (20, 30)]),
        ([(0, 10), (20, 30), (5, 25)], [(0, 30)]),  # a bridge merges three
        ([(0, 10), (3, 7)], [(0, 10)]),  # inside an existing span
        ([(5, 5), (7, 3)], []),  # empty and reversed ranges are ignored
        ([(0, 10), (10, 12), (30, 40), (12, 30)], [(0, 40)]),
    ],
)
def test_ranges_merge(added: list[tuple[int, int]], spans: list[tuple[int, int]]) -> None:
    ranges = Ranges()
    for start, end in added:
        ranges.add(start, end)
    assert ranges.spans == spans
    assert Ranges(added).spans == spans


@pytest.mark.parametrize(
    ("spans", "size", "prefix", "total", "holes"),
    [
        ([], 100, 0, 0, [(0, 100)]),
        ([(0, 100)], 100, 100, 100, []),
        ([(0, 10)], 100, 10, 10, [(10, 100)]),
        ([(10, 20)], 100, 0, 10, [(0, 10), (20, 100)]),
        ([(0, 10), (50, 60)], 100, 10, 20, [(10, 50), (60, 100)]),
        ([(0, 10), (50, 100)], 100, 10, 60, [(10, 50)]),
        ([(0, 10)], 0, 10, 10, []),  # an empty file has no holes
    ],
)
def test_ranges_prefix_total_holes(
    spans: list[tuple[int, int]], size: int, prefix: int, total: int, holes: list[tuple[int, int]]
) -> None:
    ranges = Ranges(spans)
    assert (ranges.prefix(), ranges.total(), ranges.holes(size)) == (prefix, total, holes)


@pytest.mark.parametrize(
    ("size", "connections", "piece"),
    [
        (None, 4, PROBE),  # size unknown: a probe's worth
        (10, 1, 10),  # one connection asks for everything
        (0, 1, 1),
        (10 * MIB, 4, MIB),  # never below 1 MiB
        (64 * MIB, 4, 4 * MIB),  # about four pieces per connection
        (4096 * MIB, 4, 64 * MIB),  # never above 64 MiB
        (4096 * MIB, 1, 4096 * MIB),
    ],
)
def test_piece_size(size: int | None, connections: int, piece: int) -> None:
    assert piece_size(size, connections) == piece


@pytest.mark.parametrize(
    ("holes", "first", "piece", "takes"),
    [
        # A fresh file: the probe covers the first piece, the rest is queued in pieces.
        ([(0, 40)], (0, 10), 10, [(10, 20), (20, 30), (30, 40)]),
        # A resumed file: only holes are asked for, and a piece never spans two holes.
        ([(5, 25), (30, 40)], (5, 15), 10, [(15, 25), (30, 40)]),
        # The probe sits in the middle of a hole: both sides stay queued.
        ([(0, 40)], (10, 20), 15, [(0, 10), (20, 35), (35, 40)]),
    ],
)
def test_claim_queue_hands_out_the_holes_in_pieces(
    holes: list[tuple[int, int]], first: tuple[int, int], piece: int, takes: list[tuple[int, int]]
) -> None:
    queue = ClaimQueue(threading.Lock())
    queue.plan(holes, Claim(*first), piece)
    assert queue.pending_pieces() == len(takes)
    taken = []
    while queue.unclaimed:
        claim = queue.take()
        taken.append((claim.pos, claim.end))
    assert taken == takes


def _busy(pos: int, end: int, *, seconds_ago: float, done: int) -> Claim:
    """A claim started ``seconds_ago`` that has filled ``done`` bytes since."""
    claim = Claim(pos, end)
    claim.t0 = time.monotonic() - seconds_ago
    claim.pos = pos + done
    return claim


STEAL = 4 * READ_BUF


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        (None, None),  # nothing in flight, nothing queued: done
        ((0, STEAL - 1, 1.0, 0), None),  # too small to be worth a split
        ((0, 100 * MIB, 0.01, 1), NOT_YET),  # no rate yet: ask again soon
        ((0, 10 * STEAL, 1.0, 9 * STEAL), None),  # ends within half a second anyway
        ((0, 100 * MIB, 1.0, MIB), (MIB + 99 * MIB // 2, 100 * MIB)),  # slow: the second half of what is left
    ],
)
def test_claim_queue_steals_the_tail_of_a_slow_claim(
    busy: tuple[int, int, float, int] | None, expected: NotYet | tuple[int, int] | None
) -> None:
    queue = ClaimQueue(threading.Lock())
    if busy is not None:
        pos, end, seconds_ago, done = busy
        victim = _busy(pos, end, seconds_ago=seconds_ago, done=done)
        queue.add(victim)
    got = queue.take()
    if isinstance(expected, tuple):
        assert (got.pos, got.end) == expected
        assert victim.end == got.pos  # the victim now stops where the thief starts
        assert got in queue.active
    else:
        assert got is expected


def test_claim_queue_steals_from_the_claim_with_most_left() -> None:
    queue = ClaimQueue(threading.Lock())
    small = _busy(0, 10 * MIB, seconds_ago=10, done=MIB)
    large = _busy(10 * MIB, 60 * MIB, seconds_ago=10, done=MIB)
    queue.add(small)
    queue.add(large)
    stolen = queue.take()
    assert (stolen.pos, stolen.end) == (35 * MIB + MIB // 2, 60 * MIB) and small.end == 10 * MIB

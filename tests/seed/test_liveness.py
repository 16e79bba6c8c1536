"""bake.seed.liveness: a copier's heartbeat, and a judge's watch of the partials on its own clock."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bake.seed import liveness


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(liveness.time, "monotonic", fake)
    return fake


def partial_with_beat(state: Path, name: str, beat: bytes) -> Path:
    (state / name).mkdir(parents=True, exist_ok=True)
    (state / name / "beat").write_bytes(beat)
    return state / name


def test_a_partial_that_beats_is_never_stale_and_a_still_one_is_after_the_bound(
    tmp_path: Path, clock: FakeClock
) -> None:
    state = tmp_path / ".bake"
    live = partial_with_beat(state, "partial.a.1.live", b"1 0\n")
    partial_with_beat(state, "partial.b.2.dead", b"7 100\n")
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        watch = liveness.Watch(fd, str(state))
        for beat in range(1, 200):  # a poll every 0.2 s: 40 s in all
            clock.now += 0.2
            (live / "beat").write_bytes(b"%d 0\n" % (beat + 1))
            watch.poll()
            if clock.now - 1000 < liveness.STALE_S - 0.2:
                assert watch.stale() == [], clock.now
        assert watch.stale() == ["partial.b.2.dead"]
        assert watch.quiet == 0.0  # the live one made progress all along
        assert watch.reclaim("partial.b.2.dead") and not watch.reclaim("partial.b.2.dead")
    finally:
        os.close(fd)
    assert sorted(p.name for p in state.iterdir()) == ["partial.a.1.live"]


def test_time_the_judge_did_not_run_counts_for_nothing(tmp_path: Path, clock: FakeClock) -> None:
    # The judge stopped (SIGSTOP, a hung NFS call) for 100 s: one poll's step at most, not 100 s.
    state = tmp_path / ".bake"
    partial_with_beat(state, "partial.a.1.x", b"1 0\n")
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        watch = liveness.Watch(fd, str(state))
        watch.poll()
        clock.now += 100
        watch.poll()
        assert watch.stale() == [] and watch.quiet == liveness.MAX_STEP_S
    finally:
        os.close(fd)


def test_a_copiers_beat_is_a_thread_of_its_own_process_and_sees_a_take_over(tmp_path: Path) -> None:
    state = tmp_path / ".bake"
    state.mkdir()
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        partial = liveness.Partial(fd, str(state))
        with liveness.Beat(partial) as beat:
            first = (state / partial.name / "beat").read_bytes()
            time.sleep(liveness.BEAT_S * 1.5)
            assert (state / partial.name / "beat").read_bytes() != first
            os.rename(state / partial.name, state / "stale.judge")  # a judge took it
            assert beat.taken_over.wait(liveness.BEAT_S * 3)
        partial.remove()  # no longer its own: left to the judge that took it
    finally:
        os.close(fd)
    assert (state / "stale.judge" / "beat").exists()

"""One asset's time: its deadline (given, or the default by size), the stall timeout, the cancel switch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bake.errors import DownloadError
from bake.fetch import FetchFailed
from bake.fetch.clock import DEADLINE_RULE, Clock, default_deadline, process_started
from bake.fetch.failures import Cancelled, DeadlineExceeded
from tests.fetch.conftest import KIB, blob, fetch_one, make_asset
from tests.mirror import Mirror, stall


def test_deadline_is_respected(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(100 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *[stall(10 * KIB, 30)] * 5)
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="deadline of 1 s"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, timeout=20, deadline=1)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("size", "seconds"),
    [
        pytest.param(None, 2 * 60 * 60.0, id="unknown-size"),
        pytest.param(0, 30 * 60.0, id="empty"),
        pytest.param(512 * KIB * 30 * 60, 30 * 60.0, id="at-the-floor"),
        pytest.param(925 * 1024 * KIB, 1850.0, id="checkpoint-at-512-KiB/s"),
    ],
)
def test_default_deadline(size: int | None, seconds: float) -> None:
    assert default_deadline(size) == pytest.approx(seconds)


def clock(deadline: float | None, *, timeout: float = 5.0, size: int | None = None) -> Clock:
    return Clock("vocab", timeout=timeout, deadline=deadline, cancel=threading.Event(), size=size)


def test_io_timeout_is_the_stall_timeout_cut_short_by_the_deadline() -> None:
    unstarted = clock(1.0)
    assert (unstarted.remaining(), unstarted.io_timeout()) == (None, 5.0)
    roomy, tight = clock(100.0), clock(1.0)
    roomy.start()
    tight.start()
    assert roomy.io_timeout() == 5.0
    assert 0.5 < tight.io_timeout() <= 1.0


def test_a_clock_started_at_the_runs_start_counts_from_there() -> None:
    late = clock(10.0)
    late.start(since=time.monotonic() - 11)
    assert late.remaining() < 0 and late.elapsed() >= 11
    with pytest.raises(DeadlineExceeded, match=r"asset 'vocab': deadline of 10 s passed while transferring"):
        late.io_timeout()


@pytest.mark.parametrize(
    ("deadline", "size", "says"),
    [
        pytest.param(3.0, None, "deadline of 3 s passed while reading; raise --deadline", id="given"),
        pytest.param(
            None,
            None,
            f"the default deadline of 7200 s ({DEADLINE_RULE}) passed while reading; give a longer",
            id="default-unknown-size",
        ),
        pytest.param(None, 1024, "the default deadline of 1800 s", id="default-small-file"),
    ],
)
def test_the_deadline_error_says_which_deadline(deadline: float | None, size: int | None, says: str) -> None:
    error = clock(deadline, size=size).deadline_error("reading")
    assert says in str(error) and not error.retryable


def test_a_stall_is_retried_unless_the_deadline_passed() -> None:
    running = clock(100.0, timeout=2.5)
    running.start()
    stalled = running.stall_error("reading the body")
    assert type(stalled) is DownloadError and stalled.retryable
    assert str(stalled) == "no data for 2.5 s while reading the body (stalled)"
    over = clock(1.0)
    over.start(since=time.monotonic() - 2)
    assert isinstance(over.stall_error("reading the body"), DeadlineExceeded)


def test_sleep_wakes_for_cancel_and_never_sleeps_past_the_deadline() -> None:
    cancelled = clock(None)
    cancelled.cancel.set()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        cancelled.sleep(30, "waiting to retry")
    with pytest.raises(Cancelled):
        cancelled.check_cancelled()
    short = clock(0.2)
    short.start()
    with pytest.raises(DeadlineExceeded, match="while waiting to retry"):
        short.sleep(30, "waiting to retry")
    assert time.monotonic() - started < 2
    clock(None).check_cancelled()  # not cancelled: returns


def test_process_started_is_in_the_recent_past() -> None:
    now = time.monotonic()
    assert now - 60 <= process_started() <= time.monotonic()

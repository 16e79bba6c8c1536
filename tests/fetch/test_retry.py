"""The retry policy: a pure function of the failure, the bytes an attempt added and the time left;
and against a mirror, Retry-After honoured and a persistent 5xx given up on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bake.errors import ChecksumMismatch, DownloadError
from bake.fetch import FetchFailed
from bake.fetch.retry import PROGRESS_BYTES, RetryPolicy
from tests.fetch.conftest import KIB, blob, fetch_one, make_asset
from tests.mirror import Mirror, http_error


def _most(low: float, high: float) -> float:
    """Jitter pinned to its top, so delays are exact: base * 2**step."""
    return high


def _failure(retry_after: float | None = None, *, retryable: bool = True) -> DownloadError:
    error = DownloadError("HTTP 503 from https://x/f: server error", retryable=retryable)
    error.retry_after = retry_after
    return error


@pytest.mark.parametrize(
    ("policy", "progressed", "time_left", "retry_after", "next_counts", "delay"),
    [
        (RetryPolicy(3), 0, None, None, (1, 1), 0.5),  # first failure: 0.25 fixed + up to 0.25 jitter
        (RetryPolicy(3, idle_failures=1, step=1), 0, None, None, (2, 2), 1.0),  # doubling
        (RetryPolicy(9, idle_failures=1, step=10), 0, None, None, (2, 11), 30.0),  # capped
        (RetryPolicy(3, idle_failures=2, step=2), PROGRESS_BYTES, None, None, (0, 1), 0.5),  # progress resets
        (RetryPolicy(3, idle_failures=2, step=2), PROGRESS_BYTES - 1, 60.0, 7.0, None, None),  # used up
        (RetryPolicy(3), 0, 60.0, 7.0, (1, 1), 7.0),  # the server's Retry-After wins over backoff
        (RetryPolicy(3), 0, None, 7.0, (1, 1), 7.0),  # no deadline
        (RetryPolicy(3), 0, 5.0, 7.0, None, None),  # it asks for longer than the deadline leaves
        (RetryPolicy(3, backoff_base=0.02), 0, None, None, (1, 1), 0.02),
    ],
)
def test_retry_policy(
    policy: RetryPolicy,
    progressed: int,
    time_left: float | None,
    retry_after: float | None,
    next_counts: tuple[int, int] | None,
    delay: float | None,
) -> None:
    error = _failure(retry_after)
    if next_counts is None:
        with pytest.raises(DownloadError) as info:
            policy.after(error, progressed, time_left, _most)
        assert not info.value.retryable and str(error) in str(info.value)
        return
    after, wait = policy.after(error, progressed, time_left, _most)
    assert (after.idle_failures, after.step) == next_counts
    assert wait == pytest.approx(delay)
    assert (after.attempts, after.backoff_base) == (policy.attempts, policy.backoff_base)


@pytest.mark.parametrize(
    "error",
    [
        _failure(retryable=False),
        ChecksumMismatch("a" * 64, "b" * 64, "https://x/f"),
    ],
)
def test_what_is_not_worth_retrying_is_raised_as_is(error: DownloadError) -> None:
    with pytest.raises(type(error)) as info:
        RetryPolicy(5).after(error, 0, None, _most)
    assert info.value is error


def test_the_policy_is_immutable() -> None:
    policy = RetryPolicy(3)
    policy.after(_failure(), 0, None, _most)
    assert (policy.idle_failures, policy.step) == (0, 0)
    with pytest.raises(AttributeError):
        policy.step = 1  # type: ignore[misc]


def test_retry_after_is_honoured(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", http_error(503, retry_after="1"))
    started = time.monotonic()
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert time.monotonic() - started >= 1.0  # backoff alone would be ~0.02 s
    assert mirror.requests["/f.bin"] == 2


def test_retry_after_past_the_deadline_fails_fast(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", http_error(503, retry_after="60"))
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="past this asset's deadline"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, deadline=5)
    assert time.monotonic() - started < 2


def test_persistent_5xx_gives_up_after_attempts(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *[http_error(503)] * 10)
    with pytest.raises(FetchFailed, match="gave up after 3 attempts"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, attempts=3)
    assert mirror.requests["/f.bin"] == 3

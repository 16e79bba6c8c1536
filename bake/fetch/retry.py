"""When to try a source again: an immutable retry policy, a pure function of the failure, progress and time.

As with urllib3's ``Retry``, each decision returns a new policy carrying the
updated counts, so one policy value can start every source afresh.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from bake.errors import DownloadError
from bake.fetch.failures import GaveUp

BACKOFF_BASE = 0.5  # first retry waits 0.25-0.5 s, doubling per failure ...
BACKOFF_CAP = 30.0  # ... up to 15-30 s
PROGRESS_BYTES = 256 * 1024  # an attempt that added this much is progress, not a failure


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` failed attempts in a row without progress end a source; progress resets the count."""

    attempts: int
    backoff_base: float = BACKOFF_BASE
    backoff_cap: float = BACKOFF_CAP
    progress_bytes: int = PROGRESS_BYTES
    idle_failures: int = 0  # failed attempts in a row that added less than progress_bytes
    step: int = 0  # backoff doublings so far

    def backoff(self, step: int, jitter: Callable[[float, float], float] = random.uniform) -> float:
        """Exponential backoff with equal jitter: half fixed, half random, capped."""
        delay = min(self.backoff_cap, self.backoff_base * 2**step)
        return delay / 2 + jitter(0, delay / 2)

    def after(
        self,
        error: DownloadError,
        progressed: int,
        time_left: float | None,
        jitter: Callable[[float, float], float] = random.uniform,
    ) -> tuple[RetryPolicy, float]:
        """Decide on a failed attempt that added ``progressed`` bytes, with ``time_left`` before the deadline.

        Returns the policy for the next attempt and the seconds to wait first.
        Raises ``error`` when it is not worth retrying, and a non-retryable
        DownloadError when the attempts are used up or a server's Retry-After
        reaches past the deadline.
        """
        if not error.retryable:
            raise error
        if progressed >= self.progress_bytes:
            idle_failures, step = 0, 0
        else:
            idle_failures, step = self.idle_failures + 1, self.step
        if idle_failures >= self.attempts:
            raise GaveUp(
                f"{error} (gave up after {self.attempts} attempts in a row without progress)", error
            ) from None
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None and time_left is not None and retry_after > time_left:
            raise DownloadError(
                f"{error}; it asks to retry in {retry_after:g} s, past this asset's deadline", retryable=False
            ) from None
        delay = retry_after if retry_after is not None else self.backoff(step, jitter)
        return replace(self, idle_failures=idle_failures, step=step + 1), delay

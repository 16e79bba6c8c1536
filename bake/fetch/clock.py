"""One asset's time: its wall-clock deadline, the stall timeout, and the run's cancel switch."""

from __future__ import annotations

import threading
import time

from bake.errors import DownloadError
from bake.fetch.failures import Cancelled, DeadlineExceeded


class Clock:
    """When an asset must be done, how long a socket may stay silent, and whether the run was cancelled."""

    def __init__(
        self, asset_name: str, *, timeout: float, deadline: float | None, cancel: threading.Event
    ) -> None:
        self.asset_name = asset_name
        self.timeout = timeout
        self.budget = deadline  # seconds from start(), or None
        self.cancel = cancel
        self.t0 = time.monotonic()
        self.deadline: float | None = None  # monotonic time, set by start()

    def start(self) -> None:
        self.t0 = time.monotonic()
        if self.budget is not None:
            self.deadline = self.t0 + self.budget

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def deadline_error(self, doing: str) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"asset {self.asset_name!r}: deadline of {self.budget:g} s passed while {doing}; "
            "raise --deadline, or use a faster mirror"
        )

    def io_timeout(self) -> float:
        """The socket timeout for the next operation: the stall timeout, cut short by the deadline."""
        left = self.remaining()
        if left is None:
            return self.timeout
        if left <= 0:
            raise self.deadline_error("transferring")
        return min(self.timeout, left)

    def stall_error(self, doing: str) -> DownloadError:
        left = self.remaining()
        if left is not None and left <= 0.01:
            return self.deadline_error(doing)
        return DownloadError(f"no data for {self.timeout:g} s while {doing} (stalled)", retryable=True)

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("interrupted")

    def sleep(self, seconds: float, doing: str) -> None:
        """Wait, waking early for Ctrl-C; never past the deadline."""
        left = self.remaining()
        if left is not None and seconds >= left:
            if self.cancel.wait(max(0.0, left)):
                raise Cancelled("interrupted")
            raise self.deadline_error(doing)
        if self.cancel.wait(seconds):
            raise Cancelled("interrupted")

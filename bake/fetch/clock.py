"""One asset's time: its wall-clock deadline, the stall timeout, and the run's cancel switch."""

from __future__ import annotations

import os
import threading
import time

from bake.errors import DownloadError
from bake.fetch.failures import Cancelled, DeadlineExceeded

# Without --deadline a file gets max(30 min, size / 512 KiB/s): a 925 MiB checkpoint at a poor but
# working 512 KiB/s needs 31 min. A file of unknown size gets 2 h. Nothing runs forever by default.
DEADLINE_FLOOR = 30 * 60.0
DEADLINE_RATE = 512 * 1024  # bytes per second
DEADLINE_UNSIZED = 2 * 60 * 60.0
DEADLINE_RULE = "max(30 min, size / 512 KiB/s); 2 h for an unknown size"  # default_deadline, in words


def process_started() -> float:
    """Return the ``time.monotonic()`` at which this process started; now, where the system won't say.

    A deadline measured from there counts the interpreter's own start-up, which a
    user waiting on ``bake fetch`` counts too. Linux: /proc/self/stat field 22.
    """
    now = time.monotonic()
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()  # the name may hold spaces; fields 3.. follow it
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # seconds after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 60 else now  # a long-lived process: its start says nothing about this run


def default_deadline(size: int | None) -> float:
    """Return the seconds a file of ``size`` bytes (None: unknown) gets when no --deadline is given."""
    if size is None:
        return DEADLINE_UNSIZED
    return max(DEADLINE_FLOOR, size / DEADLINE_RATE)


class Clock:
    """When an asset must be done, how long a socket may stay silent, and whether the run was cancelled.

    Without an explicit ``deadline``, the asset gets ``default_deadline(size)``;
    waiting for another process's lock counts against it like any other wait.
    """

    def __init__(
        self,
        asset_name: str,
        *,
        timeout: float,
        deadline: float | None,
        cancel: threading.Event,
        size: int | None = None,
    ) -> None:
        self.asset_name = asset_name
        self.timeout = timeout
        self.default = deadline is None
        self.budget = default_deadline(size) if deadline is None else deadline  # seconds from start()
        self.cancel = cancel
        self.t0 = time.monotonic()
        self.deadline: float | None = None  # monotonic time, set by start()

    def start(self, since: float | None = None) -> None:
        """Start the clock now, or at ``since`` (the run's start, for an asset that began with it)."""
        self.t0 = time.monotonic() if since is None else since
        self.deadline = self.t0 + self.budget

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def deadline_error(self, doing: str) -> DeadlineExceeded:
        if self.default:
            return DeadlineExceeded(
                f"asset {self.asset_name!r}: the default deadline of {self.budget:g} s ({DEADLINE_RULE}) "
                f"passed while {doing}; "
                "give a longer --deadline, or use a faster mirror"
            )
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

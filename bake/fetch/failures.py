"""How an attempt stops early: the exceptions that steer retries and cancellation inside the fetch engine."""

from __future__ import annotations

from bake.errors import DownloadError


class Changed(DownloadError):
    """The file behind a source changed (or the partial is inconsistent): start it over.

    ``validator`` says how the change showed (``ETag a -> b``, ``Last-Modified a -> b``), if it did.
    """

    def __init__(self, message: str, *, validator: str | None = None) -> None:
        super().__init__(message, retryable=True)
        self.validator = validator


class BadRange(DownloadError):
    """A source answered a Range request wrongly: read it as one plain stream from byte 0 instead."""


class Aborted(Exception):
    """Another thread of the same transfer failed; this one stops quietly."""


class DeadlineExceeded(DownloadError):
    """The asset's wall-clock deadline passed; no further source is tried."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class DiskBound(DownloadError):
    """A download of unknown size reached --max-size, or would leave less than --min-free on its disk.

    Its bytes are no use (the file is larger than allowed, or the disk is needed), so the job
    throws the partial away. ``disk`` is True for the reserve: no other source could do better.
    """

    def __init__(self, message: str, *, disk: bool) -> None:
        super().__init__(message, retryable=False)
        self.disk = disk


class GaveUp(DownloadError):
    """A source failed ``--attempts`` times in a row without progress: the network, most likely."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C); partials stay in the cache."""


NO_SPACE_ADVICE = "free some space, or point --dest / --cache-dir at a larger filesystem"

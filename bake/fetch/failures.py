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


class Unusable(DownloadError):
    """A source that can never serve the file as written (a directory, a host name that does not exist).

    Not retried, and not blamed on the network: ``advice`` says what to change.
    """

    def __init__(self, message: str, *, advice: str) -> None:
        super().__init__(message, retryable=False)
        self.advice = advice


class SizeMismatch(DownloadError):
    """A source serves another size than the manifest's ``size``: the entry or the URL is wrong."""


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
    """A source failed ``--attempts`` times in a row without progress; ``cause`` is the last failure."""

    def __init__(self, message: str, cause: DownloadError | None = None) -> None:
        super().__init__(message, retryable=False)
        self.cause = cause


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C); partials stay in the cache."""


NO_SPACE_ADVICE = "free some space, or point --dest / --cache-dir at a larger filesystem"

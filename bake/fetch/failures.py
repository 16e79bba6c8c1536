"""How an attempt stops early: the exceptions that steer retries and cancellation inside the fetch engine."""

from __future__ import annotations

from bake.errors import DownloadError, FetchError


class Changed(DownloadError):
    """The file behind a source changed (or the partial is inconsistent): start it over.

    ``validator`` says how the change showed (``ETag a -> b``, ``Last-Modified a -> b``), if it did.
    """

    kind = "changed"

    def __init__(self, message: str, *, validator: str | None = None) -> None:
        super().__init__(message, retryable=True)
        self.validator = validator


class BadRange(DownloadError):
    """A source answered a Range request wrongly: read it as one plain stream from byte 0 instead."""

    kind = "bad-range"


class Unusable(DownloadError):
    """A source that can never serve the file as written (a directory, a host name that does not exist).

    Not retried, and not blamed on the network: ``advice`` says what to change.
    """

    kind = "unusable-source"

    def __init__(self, message: str, *, advice: str) -> None:
        super().__init__(message, retryable=False)
        self.advice = advice


class SizeMismatch(DownloadError):
    """A source serves another size than the manifest's ``size``: the entry or the URL is wrong."""

    kind = "size-mismatch"

    def __init__(self, message: str, *, expected: int, seen: int, retryable: bool = True) -> None:
        super().__init__(message, retryable=retryable)
        self.expected = expected
        self.seen = seen


class Aborted(Exception):
    """Another thread of the same transfer failed; this one stops quietly."""


class DeadlineExceeded(DownloadError):
    """The asset's wall-clock deadline passed; no further source is tried."""

    kind = "deadline"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class DiskBound(DownloadError):
    """A download of unknown size reached --max-size, or would leave less than --min-free on its disk.

    Its bytes are no use (the file is larger than allowed, or the disk is needed), so the job
    throws the partial away. ``disk`` is True for the reserve: no other source could do better.
    """

    kind = "size-bound"

    def __init__(self, message: str, *, disk: bool) -> None:
        super().__init__(message, retryable=False)
        self.disk = disk


class GaveUp(DownloadError):
    """A source failed ``--attempts`` times in a row without progress; ``cause`` is the last failure.

    It reports as its cause does (kind, HTTP status, expected and seen), its message saying it gave up.
    """

    def __init__(self, message: str, cause: DownloadError | None = None) -> None:
        super().__init__(message, retryable=False)
        self.cause = cause
        for name in ("kind", "status", "expected", "seen"):
            if hasattr(cause, name):
                setattr(self, name, getattr(cause, name))


class SourcesFailed(FetchError):
    """No source delivered an asset: ``tried`` holds each URL with its error, in the order tried."""

    def __init__(self, message: str, tried: list[tuple[str, DownloadError]]) -> None:
        super().__init__(message)
        self.tried = tried


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C); partials stay in the cache."""


NO_SPACE_ADVICE = "free some space, or point --dest / --cache-dir at a larger filesystem"

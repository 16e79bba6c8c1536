"""Error hierarchy; each class carries the exit code the contract gives it."""

from __future__ import annotations


class BakeError(Exception):
    """Base class for every failure bake reports to a user."""

    exit_code = 2


class UsageError(BakeError):
    """Bad arguments or bad input (exit 2)."""

    exit_code = 2


class ManifestError(UsageError):
    """The manifest is malformed or breaks a rule (exit 2)."""


class FetchError(BakeError):
    """An asset could not be fetched or verified (exit 3)."""

    exit_code = 3


class DownloadError(FetchError):
    """One source failed to deliver an asset."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ChecksumMismatch(DownloadError):
    """A source delivered bytes whose SHA-256 is not the expected one."""

    def __init__(self, expected: str, actual: str, source: str, *, asset: str = "") -> None:
        self.expected = expected
        self.actual = actual
        self.source = source
        self.asset = asset
        who = f"{asset}: " if asset else ""
        super().__init__(
            f"{who}sha256 mismatch from {source}: expected {expected}, got {actual}; "
            "the source serves different bytes, fix the mirror or the manifest hash",
            retryable=False,
        )


class NoSpaceError(FetchError):
    """The disk filled up while writing an asset."""


class VerifyError(FetchError):
    """Files under a destination are missing or do not match (exit 3)."""


class ContextDirty(BakeError):
    """Tracked content differs from HEAD (exit 1)."""

    exit_code = 1


class GitError(BakeError):
    """git could not answer (exit 4)."""

    exit_code = 4


class BuildError(BakeError):
    """``docker buildx bake`` failed (exit 5)."""

    exit_code = 5

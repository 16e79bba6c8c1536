"""Error hierarchy; each class carries the exit code the contract gives it, and the ``kind`` the JSON
report (docs/json.md) gives it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing a check found wrong, as the JSON report states it: what, where, expected and seen."""

    kind: str
    message: str
    path: str | None = None
    asset: str | None = None
    expected: str | int | None = None
    seen: str | int | None = None


class BakeError(Exception):
    """Base class for every failure bake reports to a user; ``problems``, when given, are its findings
    one by one (a verification's files, a doctor's lookups), which the JSON report lists."""

    exit_code = 2
    kind = "error"

    def __init__(self, *args: object, problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(*args)
        self.problems = tuple(problems)


class UsageError(BakeError):
    """Bad arguments or bad input (exit 2)."""

    exit_code = 2
    kind = "usage"


class ManifestError(UsageError):
    """The manifest is malformed or breaks a rule (exit 2)."""

    kind = "manifest"


class FetchError(BakeError):
    """An asset could not be fetched or verified (exit 3)."""

    exit_code = 3
    kind = "fetch"


class DownloadError(FetchError):
    """One source failed to deliver an asset."""

    kind = "download"

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ChecksumMismatch(DownloadError):
    """A source delivered bytes whose SHA-256 is not the expected one."""

    kind = "sha256-mismatch"

    def __init__(
        self, expected: str, actual: str, source: str, *, asset: str = "", kept_size: int | None = None
    ) -> None:
        self.expected = expected
        self.actual = self.seen = actual
        self.source = source
        self.asset = asset
        who = f"{asset}: " if asset else ""
        self.kept_size = kept_size
        if kept_size is None:
            todo = "the source serves different bytes, fix the mirror or the manifest hash"
        else:  # what to do is the fetch's advice (bake.fetch.job), as pip's hash mismatch says it
            todo = (
                f"the whole file came ({kept_size} bytes), so it is not fetched again from there; "
                "it is kept in the cache under its own sha256"
            )
        super().__init__(
            f"{who}sha256 mismatch from {source}: expected {expected}, got {actual}; {todo}", retryable=False
        )


class NoSpaceError(FetchError):
    """The disk filled up while writing an asset."""

    kind = "no-space"


class VerifyError(FetchError):
    """Files under a destination are missing or do not match (exit 3); ``problems`` lists each."""

    kind = "verify"


class ContextDirty(BakeError):
    """Tracked content differs from HEAD (exit 1)."""

    exit_code = 1
    kind = "context-differs"


class GitError(BakeError):
    """git could not answer (exit 4)."""

    exit_code = 4
    kind = "git"


class BuildError(BakeError):
    """``docker buildx bake`` failed (exit 5)."""

    exit_code = 5
    kind = "build"

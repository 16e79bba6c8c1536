"""bake.errors: each error class carries the exit code and JSON ``kind`` the contract gives it."""

from __future__ import annotations

import pytest

from bake.errors import (
    BakeError,
    BuildError,
    ChecksumMismatch,
    ContextDirty,
    DownloadError,
    FetchError,
    GitError,
    ManifestError,
    NoSpaceError,
    Problem,
    UsageError,
    VerifyError,
)


@pytest.mark.parametrize(
    ("error", "exit_code", "kind", "base"),
    [
        (BakeError, 2, "error", Exception),
        (UsageError, 2, "usage", BakeError),
        (ManifestError, 2, "manifest", UsageError),
        (FetchError, 3, "fetch", BakeError),
        (DownloadError, 3, "download", FetchError),
        (NoSpaceError, 3, "no-space", FetchError),
        (VerifyError, 3, "verify", FetchError),
        (ContextDirty, 1, "context-differs", BakeError),
        (GitError, 4, "git", BakeError),
        (BuildError, 5, "build", BakeError),
    ],
)
def test_each_error_carries_its_exit_code_kind_and_message(
    error: type[BakeError], exit_code: int, kind: str, base: type[Exception]
) -> None:
    raised = error("what went wrong, and what to do")
    assert (raised.exit_code, raised.kind) == (exit_code, kind)
    assert isinstance(raised, base) and str(raised) == "what went wrong, and what to do"
    assert raised.problems == ()


def test_problems_are_kept_as_a_tuple_in_order() -> None:
    found = [Problem("missing", "gone", path="a"), Problem("size", "short", path="b", expected=3, seen=1)]
    raised = VerifyError("2 files differ", problems=iter(found))
    assert raised.problems == tuple(found)
    assert raised.problems[1].expected == 3 and raised.problems[1].asset is None


def test_a_download_error_is_retryable_unless_said_otherwise() -> None:
    assert DownloadError("timed out").retryable is True
    assert DownloadError("404", retryable=False).retryable is False


def test_a_checksum_mismatch_names_asset_source_and_both_hashes_and_is_not_retried() -> None:
    raised = ChecksumMismatch("a" * 64, "b" * 64, "https://mirror/x", asset="vocab")
    assert str(raised) == (
        f"vocab: sha256 mismatch from https://mirror/x: expected {'a' * 64}, got {'b' * 64}; "
        "the source serves different bytes, fix the mirror or the manifest hash"
    )
    assert (raised.exit_code, raised.kind, raised.retryable) == (3, "sha256-mismatch", False)
    assert (raised.expected, raised.actual, raised.seen, raised.source) == (
        "a" * 64,
        "b" * 64,
        "b" * 64,
        "https://mirror/x",
    )


def test_a_checksum_mismatch_of_a_whole_file_says_it_is_kept_and_not_fetched_again() -> None:
    raised = ChecksumMismatch("a" * 64, "b" * 64, "https://mirror/x", kept_size=12)
    assert str(raised).startswith("sha256 mismatch from https://mirror/x: ")
    assert str(raised).endswith(
        "the whole file came (12 bytes), so it is not fetched again from there; "
        "it is kept in the cache under its own sha256"
    )
    assert raised.kept_size == 12

"""The exceptions that steer an attempt: which are retried, what kind each reports, what they carry."""

from __future__ import annotations

import pytest

from bake.errors import DownloadError, FetchError
from bake.fetch.failures import (
    BadRange,
    Changed,
    DeadlineExceeded,
    DiskBound,
    GaveUp,
    SizeMismatch,
    SourcesFailed,
    Unusable,
)


@pytest.mark.parametrize(
    ("error", "retryable", "kind"),
    [
        pytest.param(Changed("ETag moved"), True, "changed", id="changed"),
        pytest.param(BadRange("wrong Content-Range", retryable=True), True, "bad-range", id="bad-range"),
        pytest.param(
            Unusable("a directory", advice="give the file"), False, "unusable-source", id="unusable"
        ),
        pytest.param(SizeMismatch("other size", expected=1, seen=2), True, "size-mismatch", id="size"),
        pytest.param(
            SizeMismatch("other size", expected=1, seen=2, retryable=False),
            False,
            "size-mismatch",
            id="size-final",
        ),
        pytest.param(DeadlineExceeded("too late"), False, "deadline", id="deadline"),
        pytest.param(DiskBound("too large", disk=False), False, "size-bound", id="disk-bound"),
    ],
)
def test_each_failure_says_whether_it_is_retried_and_its_kind(
    error: DownloadError, retryable: bool, kind: str
) -> None:
    assert isinstance(error, DownloadError)
    assert (error.retryable, error.kind) == (retryable, kind)


def test_changed_and_unusable_keep_what_they_were_given() -> None:
    assert Changed("moved", validator="ETag a -> b").validator == "ETag a -> b"
    assert Changed("moved").validator is None
    assert Unusable("a directory", advice="give the URL of the file").advice == "give the URL of the file"
    assert (DiskBound("full", disk=True).disk, DiskBound("cap", disk=False).disk) == (True, False)


def test_gave_up_reports_as_its_cause_does() -> None:
    cause = SizeMismatch("https://m/f serves 2 bytes", expected=1, seen=2)
    cause.status = 503
    gave_up = GaveUp("gave up after 3 attempts", cause)
    assert not gave_up.retryable and gave_up.cause is cause
    assert (gave_up.kind, gave_up.status, gave_up.expected, gave_up.seen) == ("size-mismatch", 503, 1, 2)
    assert str(gave_up) == "gave up after 3 attempts"


def test_gave_up_without_a_cause_is_a_plain_download_error() -> None:
    gave_up = GaveUp("gave up")
    assert (gave_up.kind, gave_up.cause, gave_up.retryable) == ("download", None, False)
    assert not hasattr(gave_up, "status")


def test_sources_failed_lists_every_source_tried_in_order() -> None:
    tried = [("https://a/f", DownloadError("HTTP 404")), ("https://b/f", DeadlineExceeded("too late"))]
    error = SourcesFailed("asset 'f' could not be fetched", tried)
    assert isinstance(error, FetchError) and not isinstance(error, DownloadError)
    assert [url for url, _ in error.tried] == ["https://a/f", "https://b/f"]

"""The exceptions that steer an attempt: which are retried, what kind each reports, what they carry."""

from __future__ import annotations

import pytest

from bake.errors import DownloadError, FetchError
from bake.fetch import failures


@pytest.mark.parametrize(
    ("error", "retryable", "kind"),
    [
        pytest.param(failures.Changed("ETag moved"), True, "changed", id="changed"),
        pytest.param(
            failures.BadRange("wrong Content-Range", retryable=True), True, "bad-range", id="bad-range"
        ),
        pytest.param(
            failures.Unusable("a directory", advice="give the file"), False, "unusable-source", id="unusable"
        ),
        pytest.param(
            failures.SizeMismatch("other size", expected=1, seen=2), True, "size-mismatch", id="size"
        ),
        pytest.param(
            failures.SizeMismatch("other size", expected=1, seen=2, retryable=False),
            False,
            "size-mismatch",
            id="size-final",
        ),
        pytest.param(failures.DeadlineExceeded("too late"), False, "deadline", id="deadline"),
        pytest.param(failures.DiskBound("too large", disk=False), False, "size-bound", id="disk-bound"),
    ],
)
def test_each_failure_says_whether_it_is_retried_and_its_kind(
    error: DownloadError, retryable: bool, kind: str
) -> None:
    assert isinstance(error, DownloadError)
    assert (error.retryable, error.kind) == (retryable, kind)


def test_changed_unusable_and_disk_bound_keep_what_they_were_given() -> None:
    assert failures.Changed("moved", validator="ETag a -> b").validator == "ETag a -> b"
    assert failures.Changed("moved").validator is None
    advice = "give the URL of the file"
    assert failures.Unusable("a directory", advice=advice).advice == advice
    assert failures.DiskBound("reserve", disk=True).disk
    assert not failures.DiskBound("cap", disk=False).disk


def test_gave_up_reports_as_its_cause_does() -> None:
    cause = failures.SizeMismatch("https://m/f serves 2 bytes", expected=1, seen=2)
    cause.status = 503
    gave_up = failures.GaveUp("gave up after 3 attempts", cause)
    assert not gave_up.retryable and gave_up.cause is cause
    assert (gave_up.kind, gave_up.status, gave_up.expected, gave_up.seen) == ("size-mismatch", 503, 1, 2)
    assert str(gave_up) == "gave up after 3 attempts"


def test_gave_up_without_a_cause_is_a_plain_download_error() -> None:
    gave_up = failures.GaveUp("gave up")
    assert (gave_up.kind, gave_up.cause, gave_up.retryable) == ("download", None, False)
    assert not hasattr(gave_up, "status")


def test_sources_failed_lists_every_source_tried_in_order() -> None:
    tried = [
        ("https://a/f", DownloadError("HTTP 404")),
        ("https://b/f", failures.DeadlineExceeded("too late")),
    ]
    error = failures.SourcesFailed("asset 'f' could not be fetched", tried)
    assert isinstance(error, FetchError) and not isinstance(error, DownloadError)
    assert [url for url, _ in error.tried] == ["https://a/f", "https://b/f"]

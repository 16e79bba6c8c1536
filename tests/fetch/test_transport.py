"""Content-Range parsing and checking, Retry-After in seconds and as a date, proxy selection with NO_PROXY."""

from __future__ import annotations

import base64
import time
from email.utils import formatdate

import pytest

from bake.errors import DownloadError
from bake.fetch.transport import (
    RETRY_AFTER_CAP,
    check_content_range,
    parse_content_range,
    proxy_for,
    retry_after_seconds,
)


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("bytes 0-99/100", (0, 99, 100)),
        ("bytes 10-19/*", (10, 19, None)),  # size unknown
        ("bytes */100", (None, None, 100)),  # the form a 416 carries
        ("BYTES  5-6 / 7 ", (5, 6, 7)),  # case and spaces are tolerated
        ("bytes 0-99", (None, None, None)),
        ("items 0-9/10", (None, None, None)),
        ("bytes a-b/c", (None, None, None)),
        ("", (None, None, None)),
        (None, (None, None, None)),
    ],
)
def test_parse_content_range(header: str | None, parsed: tuple) -> None:
    assert parse_content_range(header) == parsed


class _Answer:
    """The two things check_content_range reads from a response: its status and a header."""

    def __init__(self, status: int, content_range: str | None) -> None:
        self.status = status
        self._content_range = content_range

    def getheader(self, name: str) -> str | None:
        return self._content_range if name == "Content-Range" else None


@pytest.mark.parametrize(
    ("status", "header", "start", "end", "total", "size"),
    [
        (206, "bytes 0-9/100", 0, 10, None, 100),  # a probe: any size
        (206, "bytes 0-99/100", 0, 200, None, 100),  # asked past the end: the range ends at the file's end
        (206, "bytes 50-99/100", 50, None, None, 100),  # open-ended
        (206, "bytes 10-19/100", 10, 20, 100, 100),  # a piece of a known size
    ],
)
def test_check_content_range_accepts(
    status: int, header: str, start: int, end: int | None, total: int | None, size: int
) -> None:
    assert check_content_range(_Answer(status, header), "https://x/f", start, end, total) == size


@pytest.mark.parametrize(
    ("status", "header", "start", "end", "total"),
    [
        (200, "bytes 0-9/100", 0, 10, None),  # not a partial answer
        (206, None, 0, 10, None),
        (206, "bytes 1-10/100", 0, 10, None),  # shifted
        (206, "bytes 0-8/100", 0, 10, None),  # short
        (206, "bytes 0-9/*", 0, 10, None),  # no size to plan with
        (206, "bytes 10-19/200", 10, 20, 100),  # the file changed size
        (206, "bytes 0-99/100", 0, None, 50),
    ],
)
def test_check_content_range_refuses(
    status: int, header: str | None, start: int, end: int | None, total: int | None
) -> None:
    with pytest.raises(DownloadError) as info:
        check_content_range(_Answer(status, header), "https://user:pw@x/f", start, end, total)
    assert info.value.retryable
    message = str(info.value)
    assert f"bytes={start}-" in message and repr(header) in message and "pw" not in message


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-3", 0.0),  # never negative
        ("100000", RETRY_AFTER_CAP),  # a pause, not the whole build
        (None, None),
        ("", None),
        ("soon", None),
    ],
)
def test_retry_after_in_seconds(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds


@pytest.mark.parametrize(
    ("offset", "low", "high"),
    [
        (30, 27.0, 30.0),  # a date 30 s ahead (the header has whole seconds)
        (-60, 0.0, 0.0),  # a date in the past: retry now
        (3600, RETRY_AFTER_CAP, RETRY_AFTER_CAP),
    ],
)
def test_retry_after_as_an_http_date(offset: int, low: float, high: float) -> None:
    seconds = retry_after_seconds(formatdate(time.time() + offset, usegmt=True))
    assert low <= seconds <= high


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "REQUEST_METHOD")


def _basic(credentials: str) -> dict[str, str]:
    return {"Proxy-Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


@pytest.mark.parametrize(
    ("env", "scheme", "host", "proxy"),
    [
        ({}, "https", "example.com", None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "https", "example.com", ("proxy", 3128, {})),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http", "example.com", None),  # each scheme its own
        ({"HTTP_PROXY": "proxy:8080"}, "http", "example.com", ("proxy", 8080, {})),  # no scheme given
        ({"HTTP_PROXY": "http://proxy"}, "http", "example.com", ("proxy", 80, {})),
        ({"HTTP_PROXY": "http://u:p%40ss@proxy:1"}, "http", "example.com", ("proxy", 1, _basic("u:p@ss"))),
        ({"HTTPS_PROXY": "http://proxy:1", "NO_PROXY": "example.com"}, "https", "example.com", None),
        ({"HTTPS_PROXY": "http://proxy:1", "NO_PROXY": "example.com"}, "https", "a.example.com", None),
        ({"HTTPS_PROXY": "http://proxy:1", "NO_PROXY": ".example.com"}, "https", "a.example.com", None),
        ({"HTTPS_PROXY": "http://proxy:1", "NO_PROXY": "*"}, "https", "example.com", None),
        (
            {"HTTPS_PROXY": "http://proxy:1", "NO_PROXY": "other.org, 127.0.0.1"},
            "https",
            "example.com",
            ("proxy", 1, {}),
        ),
        ({"HTTPS_PROXY": "http://proxy:1", "NO_PROXY": "other.org, 127.0.0.1"}, "https", "127.0.0.1", None),
    ],
)
def test_proxy_selection(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], scheme: str, host: str, proxy: tuple | None
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert proxy_for(scheme, host) == proxy

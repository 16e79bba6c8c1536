"""URL redaction, as every message and report shows a URL, and in the mirror specs that carry passwords."""

from __future__ import annotations

import pytest

from bake.errors import UsageError
from bake.fetch.sources import parse_mirrors
from bake.urls import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.com/f", "https://example.com/f"),
        ("https://user@example.com/f", "https://user@example.com/f"),  # a user name is not a secret
        ("https://user:pw@example.com/f", "https://user:***@example.com/f"),
        ("https://user:pw@example.com:8443/f?q=1#x", "https://user:***@example.com:8443/f?q=1#x"),
        ("https://user:p@ss@example.com/f", "https://user:***@example.com/f"),  # an @ in the password
        ("https://user:pw@example.com", "https://user:***@example.com"),
        ("https://example.com/a@b:c", "https://example.com/a@b:c"),  # an @ in the path is not userinfo
        ("https://u:pw@[::1/broken", "https://u:***@[::1/broken"),  # too broken to parse, still redacted
        ("not a url", "not a url"),
        ("", ""),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "spec",
    [
        "https://user:secret@mirror.internal/",  # no PREFIX=
        "https://a/=ftp://user:secret@mirror.internal/",  # a scheme bake does not fetch
        "https://a/=https://user:secret@[bad/",  # not a URL
    ],
)
def test_a_bad_mirror_spec_never_shows_its_password(spec: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_mirrors([spec])
    assert "secret" not in str(info.value) and "***" in str(info.value)

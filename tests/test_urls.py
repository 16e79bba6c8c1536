"""bake/urls.py: the schemes bake fetches, and a URL's credentials kept out of every message and report."""

from __future__ import annotations

import pytest

from bake import urls
from bake.errors import ManifestError
from bake.urls import check_url, is_credential_param, is_loopback_host, redact_url


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
    ("host", "loopback"),
    [("localhost", True), ("LOCALHOST", True), ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True),
     ("10.0.0.1", False), ("localhost.example", False), ("example.com", False), ("", False), (None, False)],
)  # fmt: skip
def test_is_loopback_host(host: str | None, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("name", "secret"),
    [("token", True), ("access_token", True), ("X-Amz-Signature", True), ("sig", True), ("apikey", True),
     ("api_key", True), ("PASSWORD", True), ("rev", False), ("signed", False), ("keys", False),
     ("revision", False)],
)  # fmt: skip
def test_is_credential_param(name: str, secret: bool) -> None:
    assert is_credential_param(name) is secret


@pytest.mark.parametrize(
    "url",
    ["https://example.com/f", "http://127.0.0.1:8080/f", "file:///srv/f", "file://localhost/srv/f",
     "hf://org/repo/f.bin", "hf://org/repo@main/dir/f.bin"],
)  # fmt: skip
def test_check_url_accepts_what_bake_fetches(url: str) -> None:
    check_url(url, allow_http=False, where="asset 'a'")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://example.com/f", "has scheme 'ftp'"),
        ("/srv/models/m.bin", "for a local file write file:///srv/models/m.bin"),
        ("http://example.com/f", "plain http to a non-loopback host"),
        ("hf://org/repo", "must look like hf://ORG/REPO[@REVISION]/PATH"),
        ("https:///f", "has no host"),
        ("https://example.com:99999/f", "is not a valid URL"),
        ("https://example.com/a\nb", "holds a control character"),
        ("file://build-host/srv/f", "names the host 'build-host'"),
        ("file:x.bin", "is a relative file: URL"),
    ],
)
def test_check_url_refuses_naming_the_asset_and_the_mistake(url: str, said: str) -> None:
    with pytest.raises(ManifestError) as caught:
        check_url(url, allow_http=False, where="asset 'a'")
    assert str(caught.value).startswith("asset 'a': url ") and said in str(caught.value)


def test_plain_http_is_allowed_when_asked() -> None:
    check_url("http://mirror.internal/f", allow_http=True, where="asset 'a'")


def test_a_refused_url_never_shows_its_password() -> None:
    with pytest.raises(ManifestError) as caught:
        check_url("ftp://user:secret@example.com/f", allow_http=False, where="asset 'a'")
    assert "secret" not in str(caught.value) and "user:***@example.com" in str(caught.value)


# -- issue 29 finding 11: messages never show a query credential -------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/f?token=abc&rev=2", "https://h/f?token=***&rev=2"),
        ("https://u:pw@h/f?X-Amz-Signature=abc#x", "https://u:***@h/f?X-Amz-Signature=***#x"),
        ("https://h/f?sig=abc&sv=2020", "https://h/f?sig=***&sv=2020"),
        ("https://h/f?revision=main", "https://h/f?revision=main"),
    ],
)
def test_messages_never_show_a_query_credential(url: str, shown: str) -> None:
    assert urls.redact_url(url) == shown

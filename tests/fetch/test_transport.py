"""Content-Range parsing and checking, Retry-After in seconds and as a date, proxy selection with NO_PROXY;
and over loopback: redirects, http and CONNECT proxies, TLS with a custom CA."""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import subprocess
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bake.errors import DownloadError, UsageError
from bake.fetch import FetchFailed
from bake.fetch.transport import (
    RETRY_AFTER_CAP,
    check_content_range,
    parse_content_range,
    proxy_for,
    retry_after_seconds,
)
from tests.fetch.conftest import KIB, MIB, blob, fetch_one, make_asset
from tests.loopback import LoopbackServer
from tests.mirror import Mirror, redirect


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


def test_redirect_to_second_loopback_server(mirror: Mirror, mirror2: Mirror, tmp_path: Path) -> None:
    data = blob(3 * MIB)
    mirror2.add("/cdn/f.bin", data)
    mirror.redirect("/f.bin", mirror2.url("/cdn/f.bin"))
    record = fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert record.source == mirror.url("/f.bin")
    assert mirror2.bytes_sent["/cdn/f.bin"] == len(data)
    assert mirror.bytes_sent["/f.bin"] == 0
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_redirect_loop_is_capped(mirror: Mirror, tmp_path: Path) -> None:
    mirror.redirect("/loop", mirror.url("/loop"))
    with pytest.raises(FetchFailed, match="more than 10 redirects"):
        fetch_one(make_asset(b"x", mirror.url("/loop")), tmp_path)
    assert mirror.requests["/loop"] == 11


def test_redirect_to_plain_http_elsewhere_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    mirror.script("/f.bin", redirect("http://example.invalid/f.bin"))
    with pytest.raises(FetchFailed, match="plain http"):
        fetch_one(make_asset(b"x", mirror.url("/f.bin")), tmp_path)


class _ForwardProxy(BaseHTTPRequestHandler):
    """A plain-http forward proxy that counts what it relays."""

    protocol_version = "HTTP/1.1"
    seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        target = http.client.HTTPConnection(self.headers["Host"], timeout=5)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "proxy-authorization")}
        parts = urlsplit(self.path)
        target.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
        resp = target.getresponse()
        body = resp.read()
        self.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in ("transfer-encoding", "connection"):
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("bypass", [False, True], ids=["via-http-proxy", "no-proxy-bypasses"])
def test_http_proxy_and_no_proxy_are_honoured(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bypass: bool
) -> None:
    data = blob(20 * KIB)
    mirror.add("/f.bin", data)
    handler = type("Proxy", (_ForwardProxy,), {"seen": []})
    with LoopbackServer(handler) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url)
        if bypass:
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert handler.seen == ([] if bypass else [mirror.url("/f.bin")])
    assert [e["via_proxy"] for e in mirror.log] == [False]


class _ConnectProxy(BaseHTTPRequestHandler):
    """An https proxy: CONNECT host:port, then bytes both ways."""

    seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def do_CONNECT(self) -> None:
        self.seen.append(self.path)
        host, port = self.path.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)), timeout=5)
        self.send_response(200, "Connection established")
        self.end_headers()

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(upstream, self.connection), daemon=True)
        back.start()
        pump(self.connection, upstream)
        back.join(timeout=5)
        upstream.close()
        self.close_connection = True


def test_https_proxy_tunnels_with_connect(
    clean_net_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls_cert: tuple[str, str]
) -> None:
    data = blob(2 * MIB)
    handler = type("Proxy", (_ConnectProxy,), {"seen": []})
    with LoopbackServer(handler) as proxy, Mirror({"/f.bin": data}, tls=tls_cert) as secure:
        monkeypatch.setenv("HTTPS_PROXY", proxy.base_url)
        fetch_one(make_asset(data, secure.url("/f.bin")), tmp_path, ca_bundle=tls_cert[0], connections=2)
        target = secure.base_url.removeprefix("https://")
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert handler.seen and set(handler.seen) == {target}  # every connection went through the tunnel


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.mark.parametrize("trust", ["ca-bundle-option", "ssl-cert-file-env", "untrusted"])
def test_https_with_custom_ca(
    clean_net_env: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tls_cert: tuple[str, str],
    trust: str,
) -> None:
    data = blob(2 * MIB)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    overrides: dict = {}
    if trust == "ca-bundle-option":
        overrides["ca_bundle"] = tls_cert[0]
    elif trust == "ssl-cert-file-env":
        monkeypatch.setenv("SSL_CERT_FILE", tls_cert[0])
    with Mirror({"/f.bin": data}, tls=tls_cert) as secure:
        asset = make_asset(data, secure.url("/f.bin"))
        if trust == "untrusted":
            with pytest.raises(FetchFailed, match=r"not trusted.*--ca-bundle"):
                fetch_one(asset, tmp_path, **overrides)
            return
        fetch_one(asset, tmp_path, **overrides)
        assert secure.bytes_sent["/f.bin"] == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_missing_ca_bundle_is_a_usage_error(tmp_path: Path) -> None:
    asset = make_asset(b"x", "https://127.0.0.1:1/f.bin")
    with pytest.raises(UsageError, match="--ca-bundle"):
        fetch_one(asset, tmp_path, ca_bundle=str(tmp_path / "nope.pem"))

"""HTTP(S) for fetches: TLS, proxies, keep-alive, redirects, status errors, Content-Range and Retry-After.

A client knows nothing of jobs or files: it takes its timeouts, the way to
register its connection with a transfer, and a request counter as arguments.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import re
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Protocol
from urllib.parse import unquote, urljoin, urlsplit

from bake import __version__
from bake.errors import DownloadError, ManifestError, UsageError
from bake.fetch.failures import Aborted, BadRange, Unusable
from bake.fetch.options import FetchOptions
from bake.fetch.sources import Source, origin_of
from bake.urls import check_url, redact_url

RETRY_AFTER_CAP = 120.0  # a server may ask for a pause, not for the whole build
MAX_REDIRECTS = 10
_REDIRECTS = (301, 302, 303, 307, 308)
_USER_AGENT = f"bake/{__version__}"
_CONTENT_RANGE = re.compile(r"\s*bytes\s+(?:(\d+)-(\d+)|\*)\s*/\s*(\d+|\*)\s*", re.IGNORECASE)


# OpenSSL's X509_V_ERR_* codes -> what to do. Only an unknown CA is fixed by a CA bundle.
_TLS_UNKNOWN_CA = "pass --ca-bundle (or set SSL_CERT_FILE) with the CA that signs it"
_TLS_DATES = (
    "the server must renew its certificate (or check this machine's clock); a CA bundle cannot fix it"
)
_TLS_NAME = "the certificate is for another name: use a URL with the host name it was issued for"
_TLS_HINTS = {
    2: _TLS_UNKNOWN_CA,  # unable to get issuer certificate
    18: _TLS_UNKNOWN_CA,  # self-signed certificate
    19: _TLS_UNKNOWN_CA,  # self-signed certificate in the chain
    20: _TLS_UNKNOWN_CA,  # unable to get local issuer certificate
    21: _TLS_UNKNOWN_CA,  # unable to verify the first certificate
    9: _TLS_DATES,  # certificate is not yet valid
    10: _TLS_DATES,  # certificate has expired
    62: _TLS_NAME,  # hostname mismatch
    64: _TLS_NAME,  # IP address mismatch
}
_TLS_OTHER = "the server's certificate is refused; fix it on the server, or use another mirror"


class _HttpStatus(DownloadError):
    """A source answered with an error status."""

    kind = "http-status"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        retryable: bool,
        retry_after: float | None,
        error_code: str | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status
        self.retry_after = retry_after
        self.error_code = error_code  # the Hub's X-Error-Code (RepoNotFound, RevisionNotFound, ...)


class Timeouts(Protocol):
    """How long a socket may wait, and the error for one that waited too long (a Clock is one)."""

    def io_timeout(self) -> float: ...

    def stall_error(self, doing: str) -> DownloadError: ...


class ConnectionSet(Protocol):
    """Where a client registers its connection, so that a failing transfer can cut it (a Transfer is one)."""

    def add_connection(self, conn: http.client.HTTPConnection) -> None: ...

    def drop_connection(self, conn: http.client.HTTPConnection) -> None: ...

    def aborted(self) -> bool: ...


def make_ssl_context(options: FetchOptions) -> ssl.SSLContext:
    cafile = options.ca_bundle or os.environ.get("SSL_CERT_FILE") or None
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        origin = "--ca-bundle" if options.ca_bundle else "SSL_CERT_FILE"
        raise UsageError(
            f"{origin} {cafile}: cannot load it as a CA bundle ({exc}); give a PEM file"
        ) from None


def retry_after_seconds(value: str | None) -> float | None:
    """Return a Retry-After wait (in seconds or as an HTTP date) in seconds, capped; None if unusable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError):
            return None
    return max(0.0, min(seconds, RETRY_AFTER_CAP))


def parse_content_range(value: str | None) -> tuple[int | None, int | None, int | None]:
    """Return (first, last, total) of a Content-Range header; None for a part absent, ``*`` or unparsable."""
    match = _CONTENT_RANGE.fullmatch(value or "")
    if not match:
        return None, None, None
    first, last, total = match.groups()
    return (int(first) if first else None, int(last) if last else None, None if total == "*" else int(total))


def check_content_range(
    resp: http.client.HTTPResponse, url: str, start: int, end: int | None, total: int | None
) -> int:
    """Check that ``resp`` is a 206 for bytes ``start``..``end - 1`` of ``total`` bytes. Returns the size.

    ``end`` None asks for the rest of the file, and a server may end any range
    at the file's end; ``total`` None accepts any size. Raises BadRange otherwise.
    """
    header = resp.getheader("Content-Range")
    first, last, size = parse_content_range(header)
    expected_last = None if size is None else min(end or size, size) - 1
    right_size = size is not None and (total is None or size == total)
    if resp.status == 206 and first == start and right_size and last == expected_last:
        return size
    asked = f"{start}-{'' if end is None else end - 1}"
    expected = (
        f"{start}-{'' if expected_last is None else expected_last}/{'<size>' if total is None else total}"
    )
    raise BadRange(
        f"{redact_url(url)} answered Range bytes={asked} with HTTP {resp.status} "
        f"and Content-Range {header!r}; expected 206 bytes {expected}",
        retryable=True,
    )


@dataclass(frozen=True)
class Validators:
    """What identifies a version of a file on a server: its ETag, else its Last-Modified date."""

    etag: str | None = None
    modified: str | None = None

    @classmethod
    def of(cls, resp: http.client.HTTPResponse) -> Validators:
        return cls(resp.getheader("ETag"), resp.getheader("Last-Modified"))

    def if_range(self) -> str | None:
        """The If-Range value that resumes only this version: a strong ETag, else the date."""
        if self.etag:
            return None if self.etag.startswith("W/") else self.etag
        return self.modified

    def change_to(self, new: Validators) -> str | None:
        """``ETag a -> b`` (or ``Last-Modified a -> b``) when ``new`` names another version, else None."""
        if self.etag or new.etag:
            if self.etag and new.etag and self.etag != new.etag:
                return f"ETag {self.etag} -> {new.etag}"
            return None
        if self.modified and new.modified and self.modified != new.modified:
            return f"Last-Modified {self.modified} -> {new.modified}"
        return None


# Answers of getaddrinfo that no retry changes: the name does not exist (or has no address).
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def resolver_failure(exc: socket.gaierror, host: str, *, proxy: str | None = None) -> DownloadError:
    """The error for a host name that did not resolve: permanent when it does not exist (EAI_NONAME),
    transient when the resolver could not answer now (EAI_AGAIN and the rest)."""
    name = proxy or host
    what = f"the proxy {name} (for {host})" if proxy else f"the host name {name}"
    if exc.errno in _NO_SUCH_NAME:
        fix = "check HTTPS_PROXY / HTTP_PROXY" if proxy else "check the host in the URL"
        return Unusable(
            f"{what} does not exist (DNS: {exc.strerror})",
            advice=f"{fix} (a typo?), or add --mirror PREFIX=REPLACEMENT to a host that resolves",
        )
    return DownloadError(f"{what} could not be resolved now (DNS: {exc.strerror})", retryable=True)


def describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


class HttpClient:
    """One connection's worth of HTTP: keep-alive per origin, proxies, redirects, status mapping."""

    def __init__(
        self,
        *,
        timeouts: Timeouts,
        connections: ConnectionSet,
        ssl_context: Callable[[], ssl.SSLContext],
        allow_http: bool,
        on_request: Callable[[], None],
    ) -> None:
        self.timeouts = timeouts
        self.connections = connections
        self.ssl_context = ssl_context
        self.allow_http = allow_http
        self.on_request = on_request
        self.conn: http.client.HTTPConnection | None = None
        self.key: tuple | None = None
        self.proxy_headers: dict[str, str] | None = None  # set when plain http goes through a proxy

    def close(self) -> None:
        if self.conn is not None:
            self.connections.drop_connection(self.conn)
            self.conn.close()
            self.conn = None

    def set_timeout(self, seconds: float) -> None:
        if self.conn is not None and self.conn.sock is not None:
            self.conn.sock.settimeout(seconds)

    def request(
        self, source: Source, url: str, headers: dict[str, str]
    ) -> tuple[http.client.HTTPResponse, str]:
        """GET ``url``, following redirects. Returns (response, final URL) for 200, 206 and 416.

        Credentials go only to the source's own origin, never to a host a
        redirect leads to. Raises DownloadError for everything else.
        """
        for _ in range(MAX_REDIRECTS + 1):
            try:  # a manifest URL, or a Location header: either may be malformed
                check_url(url, allow_http=self.allow_http, where="redirect target")
            except ManifestError as exc:
                raise DownloadError(str(exc), retryable=False) from None
            if urlsplit(url).scheme.lower() not in ("http", "https"):
                raise DownloadError(f"redirected to {redact_url(url)}, which is not http(s)", retryable=False)
            sent = {"User-Agent": _USER_AGENT, "Accept-Encoding": "identity", **headers}
            if source.auth and origin_of(url) == source.auth_origin:
                sent.update(source.auth)
            try:
                resp = self._send(url, sent)
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as exc:
                shown = redact_url(url)
                raise DownloadError(f"cannot get {shown}: {describe_error(exc)}", retryable=True) from None
            if resp.status in _REDIRECTS:
                location = resp.getheader("Location")
                self._drain(resp)
                if not location:
                    raise DownloadError(
                        f"HTTP {resp.status} from {redact_url(url)} without a Location header", retryable=True
                    )
                try:
                    url = urljoin(url, location)
                except ValueError:
                    raise DownloadError(
                        f"HTTP {resp.status} from {redact_url(url)} redirects to {redact_url(location)!r}, "
                        "which is not a valid URL",
                        retryable=False,
                    ) from None
                continue
            if resp.status in (200, 206, 416):
                return resp, url
            self.close()
            raise _status_error(resp, url)
        raise DownloadError(
            f"more than {MAX_REDIRECTS} redirects starting at {redact_url(source.url)}", retryable=False
        )

    def _drain(self, resp: http.client.HTTPResponse) -> None:
        if resp.length is not None and resp.length <= 65536:
            with contextlib.suppress(OSError, http.client.HTTPException):
                resp.read()
                return
        self.close()

    def _send(self, url: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        reused = self.conn is not None and self.key == origin_of(url)
        try:
            return self._send_once(url, headers)
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
            if not reused:
                raise
            return self._send_once(url, headers)  # the server had closed an idle keep-alive connection

    def _send_once(self, url: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        """Send one GET; lets a reset escape so _send can tell a stale keep-alive connection."""
        parts = urlsplit(url)
        if self.conn is None or self.key != origin_of(url):
            self.close()
            self.conn = self._connect(parts)
            self.key = origin_of(url)
            self.connections.add_connection(self.conn)
        if self.connections.aborted():
            raise Aborted()
        conn = self.conn
        timeout = self.timeouts.io_timeout()
        conn.timeout = timeout
        self.set_timeout(timeout)
        if self.proxy_headers is not None:
            target = url.split("#")[0]
            headers = {**headers, **self.proxy_headers}
        else:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
        except ssl.SSLCertVerificationError as exc:
            self.close()
            raise DownloadError(
                f"TLS certificate of {parts.hostname} is not trusted ({exc.verify_message}); "
                f"{_TLS_HINTS.get(exc.verify_code, _TLS_OTHER)}",
                retryable=False,
            ) from None
        except TimeoutError:
            self.close()
            raise self.timeouts.stall_error(f"waiting for {parts.hostname} to answer") from None
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
            self.close()
            raise
        except socket.gaierror as exc:
            self.close()
            looked_up = conn.host if conn.host != parts.hostname else None  # a proxy's name
            raise resolver_failure(exc, parts.hostname or "", proxy=looked_up) from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            shown = redact_url(url)
            raise DownloadError(f"cannot get {shown}: {describe_error(exc)}", retryable=True) from None
        self.on_request()
        return resp

    def _connect(self, parts) -> http.client.HTTPConnection:
        host = parts.hostname
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        timeout = self.timeouts.io_timeout()
        proxy = proxy_for(scheme, host)
        self.proxy_headers = None
        if scheme == "https":
            if proxy:
                conn = http.client.HTTPSConnection(
                    proxy[0], proxy[1], timeout=timeout, context=self.ssl_context()
                )
                conn.set_tunnel(host, port, headers=proxy[2])
                return conn
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self.ssl_context())
        if proxy:
            self.proxy_headers = proxy[2]
            return http.client.HTTPConnection(proxy[0], proxy[1], timeout=timeout)
        return http.client.HTTPConnection(host, port, timeout=timeout)


def proxy_for(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """The proxy for ``scheme`` from HTTPS_PROXY/HTTP_PROXY, unless NO_PROXY exempts ``host`` (as urllib)."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    parts = urlsplit(proxy)
    headers = {}
    if parts.username:
        creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(creds).decode()
    return parts.hostname or "", parts.port or 80, headers


def _status_error(resp: http.client.HTTPResponse, url: str) -> _HttpStatus:
    status = resp.status
    retryable = status in (408, 425, 429) or 500 <= status < 600
    hints = {
        404: "the file is not at this URL (not retried)",
        410: "the file is gone from this URL (not retried)",
        401: (
            "authentication required: give a mirror's credentials in its URL, https://USER:PASSWORD@host/… "
            "(in a build, through the bake_mirrors secret); for hf:// set HF_TOKEN or HF_TOKEN_FILE "
            "(not retried)"
        ),
        403: "access denied (not retried)",
        429: "rate limited",
    }
    hint = hints.get(status, "server error" if retryable else "refused (not retried)")
    return _HttpStatus(
        f"HTTP {status} {resp.reason} from {redact_url(url)}: {hint}",
        status=status,
        retryable=retryable,
        retry_after=retry_after_seconds(resp.getheader("Retry-After")),
        error_code=resp.getheader("X-Error-Code"),
    )

"""URLs as a manifest gives them: the schemes bake fetches, and a URL's credentials kept out of messages."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

from bake.control_chars import has_control
from bake.errors import ManifestError

SCHEMES = ("https", "http", "file", "hf")


def is_loopback_host(host: str | None) -> bool:
    """Return True for ``localhost`` and loopback IP literals."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Query parameters that carry a secret: tokens, keys, passwords, and the signatures of presigned
# URLs (S3's X-Amz-*, Google's X-Goog-*, Azure's SAS ``sig``). A name that contains one of the
# words counts, whatever its case.
_CREDENTIAL_PARAM = re.compile(
    r"token|secret|passw|signature|credential|api_?key|^(sig|key|auth|pwd|code)\Z", re.IGNORECASE
)


def is_credential_param(name: str) -> bool:
    """Return whether a query parameter named ``name`` looks like it carries a credential."""
    return bool(_CREDENTIAL_PARAM.search(name))


def _redact_query(query: str) -> str:
    return "&".join(
        f"{name}=***" if sep and is_credential_param(name) else f"{name}{sep}{value}"
        for name, sep, value in (part.partition("=") for part in query.split("&"))
    )


def redact_url(url: str) -> str:
    """Return ``url`` with any password, and any query value that looks like a credential, as ``***``.

    For messages and reports. Plain string surgery, not urlsplit: it must also work on a URL too
    broken to parse.
    """
    scheme, sep, rest = url.partition("://")
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    userinfo, at, hostport = rest[:end].rpartition("@")
    if sep and at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:***@{hostport}{rest[end:]}"
    before, question, query = rest.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        rest = f"{before}?{_redact_query(query)}{hash_}{fragment}"
    return f"{scheme}{sep}{rest}"


def check_url(url: str, *, allow_http: bool, where: str) -> None:
    """Raise ManifestError unless ``url`` parses and has an allowed scheme.

    ``where`` names the asset (or option) in the message; a password in the
    URL never reaches it.
    """
    shown = redact_url(url)
    if has_control(url):
        raise ManifestError(
            f"{where}: url {shown!r} holds a control character (a tab, a line break...); "
            "write it percent-encoded, for example %0A for a newline"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - the property raises for a port out of range
    except ValueError as exc:
        raise ManifestError(f"{where}: url {shown!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        # A path where a URL belongs (bake add /srv/models/m.bin): the file:// URL it means.
        local = f"; for a local file write file://{url}" if not scheme and url.startswith("/") else ""
        raise ManifestError(
            f"{where}: url {shown!r} has scheme {scheme or 'none'!r}; expected one of "
            f"https://, http:// (loopback only), file:// or hf://ORG/REPO[@REV]/PATH{local}"
        )
    if scheme == "http" and not allow_http and not is_loopback_host(parts.hostname):
        raise ManifestError(
            f"{where}: url {shown!r} is plain http to a non-loopback host; "
            "use https, or pass --allow-http if this network is trusted"
        )
    if scheme == "hf" and len([p for p in (parts.netloc + parts.path).split("/") if p]) < 3:
        raise ManifestError(f"{where}: url {shown!r} must look like hf://ORG/REPO[@REVISION]/PATH")
    if scheme in ("https", "http") and not parts.hostname:
        raise ManifestError(f"{where}: url {shown!r} has no host")
    if scheme == "file":
        _check_file_url(url, parts, where)


def _check_file_url(url: str, parts: SplitResult, where: str) -> None:
    """Refuse a file: URL a build would misread: a relative one, or one that names another host."""
    shown = redact_url(url)
    if parts.netloc not in ("", "localhost"):
        raise ManifestError(
            f"{where}: url {shown!r} names the host {parts.netloc!r}; bake reads file:// URLs on this "
            f"machine only: write file://{parts.path or '/path/to/file'} (file:/// and an absolute path)"
        )
    if not parts.path.startswith("/"):
        raise ManifestError(
            f"{where}: url {shown!r} is a relative file: URL, which would be read against whatever "
            "directory bake runs in; write an absolute one: file:///path/to/file"
        )

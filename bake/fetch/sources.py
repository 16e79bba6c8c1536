"""Where to get an asset: mirror rewrites, candidate URLs, and file:// and hf:// URLs resolved to a source."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bake.asset import Asset
from bake.errors import DownloadError, ManifestError, UsageError
from bake.fetch.options import FetchOptions
from bake.urls import SCHEMES, check_url, redact_url


def parse_mirrors(specs: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Parse ``PREFIX=REPLACEMENT`` rewrites; each spec may hold several, separated by whitespace.

    Returns (prefix, replacement) pairs in order. Raises UsageError for a spec
    without ``=``, with an empty side, or with a replacement of unknown scheme.
    """
    pairs = []
    for spec in specs:
        for item in spec.split():
            prefix, sep, replacement = item.partition("=")
            # A mirror URL may carry a password: messages show it redacted.
            shown = f"{prefix}={redact_url(replacement)}" if sep else redact_url(item)
            if not sep or not prefix or not replacement:
                raise UsageError(
                    f"mirror {shown!r}: expected PREFIX=REPLACEMENT, for example "
                    "https://www.modelscope.cn/=https://mirror.internal/modelscope/"
                )
            try:
                parts = urlsplit(replacement)
                scheme = parts.scheme.lower()
                parts.port  # noqa: B018 - the property raises for a port out of range
            except ValueError as exc:
                raise UsageError(f"mirror {shown!r}: the replacement is not a valid URL ({exc})") from None
            if scheme not in SCHEMES:
                raise UsageError(
                    f"mirror {shown!r}: the replacement has scheme {scheme or 'none'!r}; "
                    "expected https://, http://, file:// or hf://"
                )
            pairs.append((prefix, replacement))
    return tuple(pairs)


def candidate_urls(asset: Asset, options: FetchOptions) -> list[str]:
    """Return the URLs to try for ``asset``, in order: every mirror rewrite, then the originals.

    With ``no_origin`` only rewrites are returned. Raises ManifestError for a
    URL with a disallowed scheme, UsageError when nothing is left to try.
    """
    rewritten: list[str] = []
    originals: list[str] = []
    for url in asset.urls:
        for prefix, replacement in options.mirrors:
            if url.startswith(prefix):
                new = replacement + url[len(prefix) :]
                check_url(
                    new,
                    allow_http=options.allow_http,
                    where=f"asset {asset.name!r} (mirror {prefix}={redact_url(replacement)})",
                )
                rewritten.append(new)
        # Under --no-origin, HF_ENDPOINT counts as a rewrite: an hf:// URL then never reaches the Hub.
        if not options.no_origin or (url.startswith("hf://") and os.environ.get("HF_ENDPOINT")):
            check_url(url, allow_http=options.allow_http, where=f"asset {asset.name!r}")
            originals.append(url)
    urls = list(dict.fromkeys(rewritten + originals))
    if not urls:
        raise UsageError(
            f"asset {asset.name!r}: --no-origin is set and no mirror prefix matches its urls "
            f"({', '.join(map(redact_url, asset.urls))}); add a --mirror PREFIX=REPLACEMENT for one of them"
        )
    return urls


@dataclass(frozen=True)
class Source:
    """A candidate URL made concrete: what to GET (or read), and the credentials for one origin."""

    url: str
    http_url: str | None = None
    path: str | None = None
    auth: dict[str, str] = field(default_factory=dict)
    auth_origin: tuple | None = None


def origin_of(url: str) -> tuple:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def resolve_source(url: str, options: FetchOptions) -> Source:
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise DownloadError(
                f"{url}: file:// URLs must name a local absolute path (file:///...)", retryable=False
            )
        return Source(url, path=unquote(parts.path))
    if scheme == "hf":
        return _resolve_hf(url, options)
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return Source(url, http_url=url)
    # A mirror behind Basic auth: the credentials leave the URL (never sent to a proxy in a request
    # line) and become a header for this origin only.
    creds = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    auth = {"Authorization": "Basic " + base64.b64encode(creds).decode("ascii")}
    return Source(url, http_url=bare, auth=auth, auth_origin=origin_of(bare))


def _resolve_hf(url: str, options: FetchOptions) -> Source:
    """Turn ``hf://[datasets/|spaces/]ORG/REPO[@REVISION]/PATH`` into the Hub's resolve URL and a token."""
    segments = url[len("hf://") :].split("/")
    repo_type = None
    if segments[0] in ("datasets", "spaces"):
        repo_type = segments.pop(0)[:-1]
    if len(segments) < 3 or not all(segments[:3]):
        raise DownloadError(f"{url}: expected hf://ORG/REPO[@REVISION]/PATH", retryable=False)
    org, repo_rev, *path = segments
    repo, _, revision = repo_rev.partition("@")
    try:
        import huggingface_hub
    except ImportError:
        raise DownloadError(
            f"{url}: hf:// sources need huggingface_hub; pip install huggingface_hub "
            "(or add a --mirror that maps hf:// to an https mirror)",
            retryable=False,
        ) from None
    try:
        resolved = huggingface_hub.hf_hub_url(
            f"{org}/{repo}",
            "/".join(path),
            repo_type=repo_type,
            revision=unquote(revision) or None,
            endpoint=hf_endpoint(),
        )
    except ValueError as exc:
        raise DownloadError(f"{url}: not a valid Hub file reference: {exc}", retryable=False) from None
    try:
        check_url(resolved, allow_http=options.allow_http, where=f"{url} (via HF_ENDPOINT)")
    except ManifestError as exc:
        raise DownloadError(str(exc), retryable=False) from None
    token = hf_token()
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    return Source(url, http_url=resolved, auth=auth, auth_origin=origin_of(resolved))


def _stored_hf_token() -> str | None:
    try:
        import huggingface_hub
    except ImportError:
        pass
    else:
        return huggingface_hub.get_token()
    env = os.environ
    hf_home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    path = env.get("HF_TOKEN_PATH") or os.path.join(hf_home, "token")
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except OSError:  # no stored login, as huggingface_hub reads it
        return None


def hf_endpoint() -> str | None:
    """HF_ENDPOINT without its trailing slash; None leaves the Hub to huggingface_hub (huggingface.co)."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or None


# What the Hub's refusals (its X-Error-Code) mean, said alike by `bake add` and both downloaders.
HUB_REFUSALS = {
    "RevisionNotFound": "the Hub does not know that commit; was it force-pushed away?",
    "EntryNotFound": "the Hub has no such file at that commit (404); the repository changed",
    "RepoNotFound": (
        "the Hub refused the repository (not found, private or gated); "
        "set HF_TOKEN or HF_TOKEN_FILE to a token that may read it"
    ),
}


def hf_token() -> str | None:
    """HF_TOKEN, else the file HF_TOKEN_FILE names (a BuildKit secret), else the stored login.

    The stored login (``hf auth login``, HF_TOKEN_PATH) comes from huggingface_hub's own lookup
    when it is installed, else from the same places: HF_TOKEN_PATH, else
    ``${HF_HOME:-${XDG_CACHE_HOME:-~/.cache}/huggingface}/token``. None when there is none.
    Both downloaders take the token from here. Raises DownloadError (not retried) when
    HF_TOKEN_FILE is set but unreadable. The value is never logged.
    """
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        return token
    token_file = os.environ.get("HF_TOKEN_FILE")
    if not token_file:
        return _stored_hf_token()
    try:
        return Path(token_file).read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        raise DownloadError(
            f"HF_TOKEN_FILE {token_file}: cannot read it ({exc.strerror or exc}); "
            "mount the secret there or unset HF_TOKEN_FILE",
            retryable=False,
        ) from None

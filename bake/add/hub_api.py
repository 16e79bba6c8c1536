"""What the Hub says a repository holds at a commit: read by bake's HTTP client, bounded, each field checked.

``bake add hf://…`` asks the Hub two things, as huggingface_hub does (hf_api.py):

- ``GET /api/{models,datasets}/ORG/NAME/revision/REV?expand=sha``: the commit a branch or
  tag names (only that property: a repository's info can list every file);
- ``GET /api/…/tree/COMMIT?recursive=true&expand=false``: every file, a page at a time
  (1,000 entries on the Hub), each page naming the next in a ``Link: <…>; rel="next"``
  header, as huggingface_hub's ``list_repo_tree`` follows them.

Nothing an answer says is used before it is checked: the commit is 40 hex characters,
blob ids 40, LFS sha256s 64; paths are relative plain components within the manifest's
limits; sizes are non-negative integers; a listing is bounded in pages, entries and
bytes, and its next pages stay on the endpoint's origin and never repeat. Anything else
is exit 3 naming the repository and the field. The token goes to the endpoint's origin
only (bake.fetch.transport), and the answers are read under --timeout and the deadline.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote, urljoin

from bake.byte_sizes import MIB
from bake.errors import DownloadError, FetchError, ManifestError
from bake.fetch.clock import Clock
from bake.fetch.options import FetchOptions
from bake.fetch.retry import RetryPolicy
from bake.fetch.session import Session
from bake.fetch.sources import HUB_REFUSALS, Source, hf_endpoint, hf_token, origin_of
from bake.fetch.transport import HttpClient
from bake.hashes import GIT_SHA1_HEX, HUB_ETAG_HEX, SHA256_HEX
from bake.hub.schema import check_relpath
from bake.paths import MAX_COMPONENT_BYTES, MAX_PATH_BYTES
from bake.urls import redact_url

log = logging.getLogger(__name__)

# A manifest holds at most 32 MiB; a file record takes about 150 bytes of it, so no
# listing that could be pinned has more entries than this. Pages and bytes bound a
# Hub that pages without end (1,000 entries a page on the Hub: 250 pages suffice).
MAX_ENTRIES = 250_000
MAX_PAGES = 2_000
MAX_PAGE_BYTES = 16 * MIB
MAX_LISTING_BYTES = 128 * MIB
DEFAULT_ENDPOINT = "https://huggingface.co"
_NEXT = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?', re.IGNORECASE)


@dataclass(frozen=True)
class Listed:
    """One file of the listing, checked: path, size, git blob id, and the sha256 of an LFS file."""

    path: str
    size: int
    blob: str
    lfs_sha256: str | None


def endpoint() -> str:
    """HF_ENDPOINT without its trailing slash, else the Hub."""
    return hf_endpoint() or DEFAULT_ENDPOINT


class _Connections:
    """The ConnectionSet the HTTP clients of one ``bake add`` register with (nothing cuts them)."""

    def add_connection(self, conn) -> None:
        pass

    def drop_connection(self, conn) -> None:
        pass

    def aborted(self) -> bool:
        return False


class HubReader:
    """Asks one repository's Hub for JSON and file bodies; ``label`` names it in every message."""

    def __init__(self, repo: str, kind: str, options: FetchOptions) -> None:
        self.repo = repo
        self.kind = kind
        self.label = f"hf://{'datasets/' if kind == 'dataset' else ''}{repo}"
        self.options = options
        self.endpoint = endpoint()
        self.session = Session(options)
        self.clock = Clock(
            self.label, timeout=options.timeout, deadline=options.deadline, cancel=threading.Event()
        )
        self.clock.start()
        self.retry = RetryPolicy(options.attempts)
        token = hf_token() or _stored_token()
        self.source = Source(
            self.endpoint,
            http_url=self.endpoint,
            auth={"Authorization": f"Bearer {token}"} if token else {},
            auth_origin=origin_of(self.endpoint),
        )
        self._clients = threading.local()

    def client(self) -> HttpClient:
        """This thread's keep-alive client."""
        client = getattr(self._clients, "client", None)
        if client is None:
            client = HttpClient(
                timeouts=self.clock,
                connections=_Connections(),
                ssl_context=self.session.ssl_context,
                allow_http=self.options.allow_http,
                on_request=lambda: None,
            )
            self._clients.client = client
        return client

    # -- errors ------------------------------------------------------------------

    def refused(self, field: str, value: object, expected: str, where: str = "") -> FetchError:
        shown = repr(value)[:120]
        return FetchError(
            f"{self.label}{where}: the Hub answered {field} {shown}; expected {expected}. Nothing was "
            "downloaded or written: check HF_ENDPOINT, or the Hub mirror it names"
        )

    def _failed(self, what: str, exc: DownloadError) -> FetchError:
        code = getattr(exc, "error_code", None)
        refusal = HUB_REFUSALS.get("RepoNotFound" if code == "GatedRepo" else code)
        if refusal is None and getattr(exc, "status", None) in (401, 403):
            refusal = HUB_REFUSALS["RepoNotFound"]
        return FetchError(f"{what}: {refusal or exc}")

    # -- requests ----------------------------------------------------------------

    def with_retries(self, what: str, call: Callable[[], object]):
        """``call()``, retried under the fetch options' policy; a failure becomes exit 3 naming ``what``."""
        retry = self.retry
        while True:
            try:
                return call()
            except DownloadError as exc:
                try:
                    retry, delay = retry.after(exc, 0, self.clock.remaining())
                except DownloadError:
                    raise self._failed(what, exc) from None
                log.warning("%s: %s; retrying in %.1f s", what, exc, delay)
                self.clock.sleep(delay, f"waiting to ask the Hub again about {self.label}")

    def _json(self, url: str, limit: int) -> tuple[object, str | None, int]:
        """GET ``url``: its JSON (at most ``limit`` bytes), the next page its Link names, its byte count."""
        resp, _ = self.client().request(self.source, url, {"Accept": "application/json"})
        if resp.status != 200:
            self.client().close()
            raise DownloadError(f"HTTP {resp.status} from {url}: expected 200", retryable=False)
        body = self.read_body(resp, limit, "a listing page")
        try:
            doc = json.loads(body)
        except ValueError:  # UnicodeDecodeError and JSONDecodeError
            raise self.refused("a page", body[:60], "JSON") from None
        found = _NEXT.search(resp.getheader("Link") or "")
        return doc, urljoin(url, found.group(1)) if found else None, len(body)

    def read_body(self, resp, limit: int, what: str) -> bytes:
        """The body of ``resp``, refused past ``limit`` bytes or past the deadline."""
        chunks, total = [], 0
        while True:
            self.client().set_timeout(self.clock.io_timeout())
            try:
                chunk = resp.read(min(1 * MIB, limit + 1 - total))
            except TimeoutError:
                raise self.clock.stall_error(f"reading {what}") from None
            except OSError as exc:
                raise DownloadError(f"connection broke while reading {what}: {exc}", retryable=True) from None
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                self.client().close()
                raise self.refused(what, f"over {limit} bytes", f"at most {limit // MIB} MiB")
            chunks.append(chunk)

    # -- what a repository holds -------------------------------------------------

    def commit(self, revision: str | None) -> str:
        """The commit ``revision`` (None: main) names. Raises FetchError (exit 3)."""
        rev = quote(revision or "main", safe="")
        url = f"{self.endpoint}/api/{self.kind}s/{self.repo}/revision/{rev}?expand=sha"
        what = f"{self.label}@{revision or 'main'}"
        doc, _, _ = self.with_retries(what, lambda: self._json(url, MAX_PAGE_BYTES))
        sha = doc.get("sha") if isinstance(doc, dict) else None
        if not isinstance(sha, str) or not GIT_SHA1_HEX.fullmatch(sha):
            raise self.refused("commit", sha, "a commit id of 40 hex characters", f"@{revision or 'main'}")
        return sha

    def files(self, commit: str) -> list[Listed]:
        """Every file at ``commit``, each checked, in path order. Raises FetchError (exit 3)."""
        url: str | None = (
            f"{self.endpoint}/api/{self.kind}s/{self.repo}/tree/{commit}?recursive=true&expand=false"
        )
        seen: set[str] = set()
        found: dict[str, Listed] = {}
        entries = total = 0
        while url is not None:
            self._check_next(url, seen)
            seen.add(url)
            doc, url, size = self.with_retries(
                f"{self.label}@{commit}", lambda u=url: self._json(u, MAX_PAGE_BYTES)
            )
            total += size
            if not isinstance(doc, list) or (not doc and url is not None):
                raise self.refused(
                    "a listing page", doc if not doc else type(doc).__name__, "a non-empty list"
                )
            entries += len(doc)
            if entries > MAX_ENTRIES or total > MAX_LISTING_BYTES:
                raise self.refused(
                    "a listing", f"{entries} entries, {total} bytes",
                    f"at most {MAX_ENTRIES} entries and {MAX_LISTING_BYTES // MIB} MiB",
                )  # fmt: skip
            for listed in filter(None, (checked_entry(self, raw, commit) for raw in doc)):
                if listed.path in found:
                    raise self.refused("a listing", f"{listed.path} twice", "each file once", f"@{commit}")
                found[listed.path] = listed
        for path in found:  # git cannot hold a file where another file's directory is
            if any(str(parent) in found for parent in PurePosixPath(path).parents):
                raise self.refused("path", path, "no file under another file's path", f"@{commit}")
        return [found[p] for p in sorted(found)]

    def _check_next(self, url: str, seen: set[str]) -> None:
        """Refuse a next page that was read already, lives on another host, or is one page too many."""
        if url in seen:
            why = "a page it had already given"
        elif origin_of(url) != origin_of(self.endpoint):
            why = "a page on another host"
        elif len(seen) >= MAX_PAGES:
            why = f"page {len(seen) + 1}"
        else:
            return
        raise self.refused(
            "a listing", f"{why} ({redact_url(url)})",
            f"at most {MAX_PAGES} pages, each once, all on {self.endpoint}",
        )  # fmt: skip

    def stream(self, path: str, commit: str) -> Iterator[bytes]:
        """The bytes of one file at ``commit``, its answer checked first (commit, ETag, encoding)."""
        from bake.fetch.sources import resolve_source

        hf_url = f"{self.label}@{commit}/{path}"
        source = resolve_source(hf_url, self.options)
        client = self.client()
        resp, _ = client.request(source, source.http_url, {})
        if resp.status != 200:
            client.close()
            raise DownloadError(f"HTTP {resp.status} from {hf_url}: expected the whole file", retryable=False)
        where = f"@{commit}/{path}"
        told = resp.getheader("X-Repo-Commit")
        if told is not None and told != commit:
            client.close()
            raise self.refused("X-Repo-Commit", told, f"the commit {commit}", where)
        encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            client.close()
            raise self.refused("Content-Encoding", encoding, "identity: the file as stored", where)
        etag = (resp.getheader("X-Linked-Etag") or resp.getheader("ETag") or "").removeprefix("W/").strip('"')
        if etag and not HUB_ETAG_HEX.fullmatch(etag):
            client.close()
            raise self.refused("ETag", etag, "a blob id or sha256 (40 or 64 hex characters)", where)
        while True:
            client.set_timeout(self.clock.io_timeout())
            try:
                chunk = resp.read(1 * MIB)
            except TimeoutError:
                raise self.clock.stall_error(f"reading {hf_url}") from None
            except OSError as exc:
                raise DownloadError(
                    f"connection broke while reading {hf_url}: {exc}", retryable=True
                ) from None
            if not chunk:
                return
            yield chunk


def checked_entry(reader: HubReader, raw: object, commit: str) -> Listed | None:
    """One tree entry checked: a file as Listed, a directory as None. Raises FetchError naming the field."""
    where = f"@{commit}"
    if not isinstance(raw, dict) or raw.get("type") not in ("file", "directory"):
        raise reader.refused("an entry", raw, "a file or directory object", where)
    path = checked_path(reader, raw.get("path"), where)
    if raw["type"] == "directory":
        return None
    where = f"@{commit}/{path}"
    size, blob, lfs = raw.get("size"), raw.get("oid"), raw.get("lfs")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise reader.refused("size", size, "a non-negative integer", where)
    if not isinstance(blob, str) or not GIT_SHA1_HEX.fullmatch(blob):
        raise reader.refused("blob id (oid)", blob, "a git blob id of 40 hex characters", where)
    if lfs is None:
        return Listed(path, size, blob, None)
    sha = lfs.get("oid") if isinstance(lfs, dict) else None
    if not isinstance(sha, str) or not SHA256_HEX.fullmatch(sha):
        raise reader.refused("LFS sha256 (lfs.oid)", sha, "64 hex characters", where)
    if lfs.get("size") != size:
        raise reader.refused("LFS size", lfs.get("size"), f"the file's size, {size}", where)
    return Listed(path, size, blob, sha)


def checked_path(reader: HubReader, path: object, where: str) -> str:
    """A listed path, refused unless relative plain components within the manifest's limits."""
    try:
        check_relpath(path, f"{reader.label}{where}", "path")
        encoded = path.encode("utf-8")
    except (ManifestError, UnicodeEncodeError):
        raise reader.refused("path", path, "a relative path of plain components, no '..'", where) from None
    # Where seal puts it: hub/<kind>s--ORG--NAME/snapshots/<commit>/<path>, within the manifest's limits.
    placed = len(f"hub/{reader.kind}s--{reader.repo.replace('/', '--')}/snapshots/{'0' * 40}/") + len(encoded)
    longest = max(len(part.encode("utf-8")) for part in PurePosixPath(path).parts)
    if placed > MAX_PATH_BYTES or longest > MAX_COMPONENT_BYTES:
        raise reader.refused(
            "path", path[:64] + "…",
            f"at most {MAX_PATH_BYTES} bytes placed, {MAX_COMPONENT_BYTES} a component",
            where,
        )  # fmt: skip
    return path


def _stored_token() -> str | None:
    """huggingface_hub's stored login (``hf auth login``), as both downloaders use it."""
    try:
        import huggingface_hub
    except ImportError:
        return None
    return huggingface_hub.get_token()

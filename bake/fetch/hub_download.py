"""One try through huggingface_hub's downloader: in a staging directory of bake's, every answer checked first.

For a ``[[hub]]`` entry with ``downloader = "huggingface_hub"``, an ``hf://`` source is
fetched by ``hf_hub_download`` (hf_xet where installed and the Hub offers it) instead of
bake's HTTP engine. It is an attempt like the others: the job's clock, lock, retry and
cache commit apply. Three things keep it safe:

- huggingface_hub writes only inside ``partial/<sha256>.staging`` of bake's cache (held
  under the job's lock, removed after the try, reclaimed by ``cache prune`` after a kill);
- every answer its HTTP client receives passes ``Guard`` first: the commit must be the
  pinned one (40 hex), the ETag the manifest's blob id or sha256 (40 or 64 hex), the size
  the manifest's. huggingface_hub builds paths from those answers (``blobs/<etag>``,
  ``snapshots/<commit>``), so nothing unchecked ever reaches its file system code;
- the guard also applies ``--timeout`` and the deadline to each request and each read,
  and turns network errors and 5xx answers into bake's errors, so that bake's retry
  policy, not huggingface_hub's own backoff, decides about retries.

The returned file becomes the partial; bake hashes it and commits it like any download.
The guard sees every request and answer through bake.fetch.hub_download_client.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from bake.asset import Asset
from bake.errors import DownloadError, UsageError
from bake.fetch.attempt import Attempt
from bake.fetch.clock import Clock
from bake.fetch.failures import Cancelled
from bake.fetch.sources import HUB_REFUSALS, hf_endpoint, hf_token
from bake.hashes import GIT_SHA1_HEX, HUB_ETAG_HEX, SHA256_HEX

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 425, 429}  # and every 5xx
_local = threading.local()  # the Guard of the attempt running on this thread, if any
_installed = threading.Lock()
_client_factory_set = False


@dataclass(frozen=True)
class HubFile:
    """The Hub file an ``hf://`` source names, with what the manifest pins for it."""

    repo: str
    kind: str
    commit: str
    path: str
    etag: str
    size: int
    url: str


def hub_file(asset: Asset, url: str) -> HubFile | None:
    """The pinned Hub file behind ``url`` for a ``[[hub]]`` blob asset, or None for any other source."""
    for entry, path in asset.hub.uses if asset.hub is not None else ():
        if entry.url(path) == url:
            return HubFile(entry.repo, entry.kind, entry.commit, path, asset.hub.etag, asset.size, url)
    return None


class Guard:
    """What one attempt lets huggingface_hub's HTTP client do: checked answers, bounded in time."""

    def __init__(self, file: HubFile, clock: Clock, advance) -> None:
        self.file = file
        self.clock = clock
        self.advance = advance
        self.abort = threading.Event()
        self.error: BaseException | None = None

    # -- what a Session cancels (Ctrl-C) ----------------------------------------

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self.abort.set()

    def check_running(self) -> None:
        if self.abort.is_set():
            raise self.error if isinstance(self.error, Cancelled) else Cancelled("interrupted")
        left = self.clock.remaining()
        if left is not None and left <= 0:
            raise self.clock.deadline_error(f"fetching {self.file.url} through huggingface_hub")

    def body_limit(self) -> int:
        """The most any answer may send: the pinned file, or a small error page."""
        return self.file.size + 64 * 1024

    # -- each request and answer ------------------------------------------------

    def before(self, request) -> None:
        """Bound the request by the stall timeout, cut short by the deadline."""
        self.check_running()
        seconds = self.clock.io_timeout()
        request.extensions["timeout"] = {
            "connect": seconds,
            "read": seconds,
            "write": seconds,
            "pool": seconds,
        }

    def refused(self, field: str, value: object, expected: str) -> DownloadError:
        return DownloadError(
            f"{self.file.url}: the Hub's answer for {self.file.repo} has {field} {str(value)[:100]!r}; "
            f"expected {expected}. Nothing was downloaded or written: check HF_ENDPOINT, or the Hub "
            "mirror it names (not retried)",
            retryable=False,
        )

    def check(self, response) -> None:
        """Refuse an answer whose commit, ETag or size is not what the manifest pins; 5xx to bake's retry."""
        status = response.status_code
        if status in _RETRY_STATUS or status >= 500:
            response.close()
            raise DownloadError(f"HTTP {status} from {response.request.url}: server error", retryable=True)
        headers = response.headers
        commit = headers.get("X-Repo-Commit")
        if commit is not None and (not GIT_SHA1_HEX.fullmatch(commit) or commit != self.file.commit):
            raise self.refused("commit", commit, f"the pinned commit {self.file.commit} (40 hex characters)")
        if "/resolve/" not in response.request.url.path:
            return  # the CDN's own ETag and length are nobody's paths; the bytes are hashed anyway
        linked = headers.get("X-Linked-Etag")
        etag = _bare_etag(linked if linked is not None else headers.get("ETag"))
        if etag is not None and (not HUB_ETAG_HEX.fullmatch(etag) or etag != self.file.etag):
            raise self.refused("ETag", etag, f"{self.file.etag}, the blob the manifest pins (40 or 64 hex)")
        xet = headers.get("X-Xet-Hash")
        if xet is not None and not SHA256_HEX.fullmatch(xet):
            raise self.refused("X-Xet-Hash", xet, "64 hex characters")
        size = headers.get("X-Linked-Size", headers.get("Content-Length") if status == 200 else None)
        if size is not None and (not (size.isascii() and size.isdigit()) or int(size) != self.file.size):
            raise self.refused("size", size, f"{self.file.size} bytes, the size the manifest pins")


def _bare_etag(etag: str | None) -> str | None:
    """An ETag as huggingface_hub reads it: no weak prefix, no quotes."""
    if etag is None:
        return None
    return etag.removeprefix("W/").strip('"')


def _huggingface_hub(cache_root: Path, ssl_context):
    """Import huggingface_hub and route its HTTP client through the Guard (once per process)."""
    global _client_factory_set
    try:
        import huggingface_hub
    except ImportError:
        raise UsageError(
            "the huggingface_hub downloader needs huggingface_hub; pip install huggingface_hub"
        ) from None
    with _installed:
        if not _client_factory_set:
            # hf_xet keeps a chunk cache of its own; keep it inside bake's cache, not the user's.
            os.environ.setdefault("HF_XET_CACHE", str(cache_root / "xet"))
            from bake.fetch import hub_download_client  # httpx2 comes with huggingface_hub

            huggingface_hub.set_client_factory(
                hub_download_client.factory(ssl_context, lambda: getattr(_local, "guard", None))
            )
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()  # bake draws its own progress
            _client_factory_set = True
    return huggingface_hub


def _from_the_hub(exc: OSError) -> bool:
    """True for huggingface_hub's own errors that subclass OSError: an answer, not the disk."""
    from huggingface_hub import errors

    return isinstance(
        exc,
        (
            errors.HfHubHTTPError,
            errors.FileMetadataError,
            errors.EntryNotFoundError,
            errors.OfflineModeIsEnabled,
        ),
    )


def _hub_error(file: HubFile, exc: Exception) -> DownloadError:
    """A huggingface_hub exception as one line naming the file and the fix; never the token."""
    from huggingface_hub import errors

    for kinds, code in (
        ((errors.EntryNotFoundError, errors.RemoteEntryNotFoundError), "EntryNotFound"),
        ((errors.RevisionNotFoundError,), "RevisionNotFound"),
        ((errors.GatedRepoError, errors.RepositoryNotFoundError), "RepoNotFound"),
    ):
        if isinstance(exc, kinds):
            return DownloadError(f"{file.url}: {HUB_REFUSALS[code]}", retryable=False)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return DownloadError(f"{file.url}: huggingface_hub: {type(exc).__name__}: {first}", retryable=False)


class HubAttempt(Attempt):
    """One ``hf_hub_download`` of the source's file into the partial's staging directory, then the partial."""

    def run(self) -> None:
        file = hub_file(self.asset, self.source.url)
        self.hooks.count_attempt()
        self.hooks.count_request()
        staging = self.partial.cache.staging_dir(self.partial.sha256)
        hub = _huggingface_hub(self.partial.cache.root, self.session.ssl_context)
        guard = Guard(file, self.clock, self._advance)
        self.session.register(guard)
        shutil.rmtree(staging, ignore_errors=True)  # a killed try's leftovers: we hold the lock
        if self.partial.written_total():
            self.partial.discard()
        self.hooks.begin(file.size)
        _local.guard = guard
        try:
            local = self._download(hub, file, staging)
            self.partial.check_claim(os.path.getsize(local), file.url)
            self.partial.adopt(local, file.url)
        finally:
            _local.guard = None
            self.session.unregister(guard)
            shutil.rmtree(staging, ignore_errors=True)

    def _advance(self, n: int) -> None:
        self.hooks.advance(n)

    def _download(self, hub, file: HubFile, staging: Path) -> Path:
        """Run hf_hub_download; return the real file it made, which must lie inside ``staging``."""
        try:
            local = hub.hf_hub_download(
                file.repo,
                file.path,
                repo_type=file.kind,
                revision=file.commit,
                cache_dir=str(staging),
                token=hf_token(),
                endpoint=hf_endpoint(),
                etag_timeout=self.clock.io_timeout(),
            )
        except (DownloadError, Cancelled, UsageError):
            raise
        except Exception as exc:  # huggingface_hub raises many types; each becomes one line
            if isinstance(exc, OSError) and not _from_the_hub(exc):
                raise  # the disk or the cache directory: the job names the path and the option
            raise _hub_error(file, exc) from None
        real = Path(os.path.realpath(local))
        if not real.is_relative_to(os.path.realpath(staging)) or not real.is_file():
            raise DownloadError(
                f"{file.url}: huggingface_hub returned {real}, outside bake's staging directory; not used",
                retryable=False,
            )
        return real

"""Fetching one asset: the destination or the cache first, else each source in turn under a retry policy.

The job only orchestrates. Its parts each own one thing: the clock (deadline,
stall timeout, cancel), the retry policy, the partial file, one HTTP attempt,
the segmented transfer, and the install.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

from bake import atomic
from bake.cache import Cache
from bake.errors import ChecksumMismatch, DownloadError, FetchError
from bake.fetch import install
from bake.fetch.attempt import AttemptHooks, HttpAttempt
from bake.fetch.clock import Clock
from bake.fetch.failures import NO_SPACE_ADVICE, BadRange, Changed, DeadlineExceeded
from bake.fetch.local import FileAttempt
from bake.fetch.options import FetchRecord
from bake.fetch.partial import PartialFile
from bake.fetch.progress import Progress
from bake.fetch.retry import RetryPolicy
from bake.fetch.session import Session
from bake.fetch.sources import Source, resolve_source
from bake.manifest import Asset, redact_url

log = logging.getLogger(__name__)


class AssetJob:
    """Everything about fetching one asset in this run."""

    def __init__(
        self,
        asset: Asset,
        urls: list[str],
        dest: Path,
        cache: Cache,
        session: Session,
        progress: Progress,
        retry: RetryPolicy,
    ) -> None:
        self.asset = asset
        self.urls = urls
        self.dest = dest
        self.cache = cache
        self.session = session
        self.options = session.options
        self.progress = progress
        self._advance = functools.partial(progress.advance, asset)  # called once per read: one call
        self.retry = retry
        self.clock = Clock(
            asset.name,
            timeout=self.options.timeout,
            deadline=self.options.deadline,
            cancel=session.cancel,
            size=asset.size,
        )
        self.partial = PartialFile(cache, asset.sha256, asset.name)
        self.lock = threading.Lock()  # guards requests and etag_splits, counted from several connections
        self.requests = 0  # HTTP requests and file opens made for this asset
        self.attempts = 0
        self.progress_started = False
        self.waiting_logged = False
        self.connections = self.options.connections  # for the current source; see _from_source
        self.etag_splits: set[int] = set()  # attempts at this source whose connections saw other ETags
        self.unranged = False  # this source answered a Range wrongly: ask it for the whole file only

    # -- the whole asset ----------------------------------------------------

    def run(self) -> FetchRecord:
        try:
            try:
                record = self._run()
            except OSError as exc:
                raise os_failure(exc, self.asset, self.cache, self.partial) from None
        except FetchError as exc:
            self.progress.failed(self.asset, exc)
            raise
        self.progress.done(record)
        return record

    def _run(self) -> FetchRecord:
        self.clock.check_cancelled()
        self.clock.start()
        sha = self.asset.sha256
        target = install.target_path(self.dest, self.asset)
        if install.already_installed(target, self.asset):
            log.debug("%s: %s already verified", self.asset.name, target)
            return self._record("cache", target, cached=True)
        obj = self.cache.object_path(sha)
        with self.cache.lock(sha, shared=True, wait=self._wait_lock):
            if obj.exists() and install.install(obj, target, self.asset, verify=True):
                return self._record("cache", target, cached=True)
        with self.cache.lock(sha, wait=self._wait_lock):
            if obj.exists():
                if install.install(obj, target, self.asset, verify=True):
                    return self._record("cache", target, cached=True)
                log.warning(
                    "%s: cache entry %s does not match its sha256; fetching again", self.asset.name, obj
                )
                obj.unlink()
            source = self._download()
            install.install(obj, target, self.asset, verify=False)
        if self.requests == 0:
            source = "cache"  # a complete partial from an earlier run only needed verifying
        return self._record(source, target, cached=self.requests == 0)

    def _record(self, source: str, target: Path, *, cached: bool) -> FetchRecord:
        size = self.asset.size if self.asset.size is not None else target.stat().st_size
        return FetchRecord(
            name=self.asset.name,
            path=self.asset.path,
            source=redact_url(source),
            bytes=self.partial.received,
            size=size,
            seconds=self.clock.elapsed(),
            attempts=self.attempts,
            cached=cached,
        )

    def _wait_lock(self, seconds: float) -> None:
        if not self.waiting_logged:
            log.info("%s: another bake process is fetching it; waiting for it to finish", self.asset.name)
            self.waiting_logged = True
        self.clock.sleep(seconds, "waiting for another process to finish fetching it")

    # -- downloading ----------------------------------------------------------

    def _download(self) -> str:
        """Fill the cache object from the first source that delivers the right bytes. Returns that source."""
        self.partial.open()
        errors: list[tuple[str, DownloadError]] = []
        try:
            for url in self.urls:
                try:
                    self._from_source(resolve_source(url, self.options))
                    return url
                except DeadlineExceeded as exc:
                    errors.append((url, exc))
                    break
                except DownloadError as exc:
                    log.warning("%s: %s: %s", self.asset.name, redact_url(url), exc)
                    errors.append((url, exc))
        finally:
            self.partial.close()
        tried = "\n".join(f"  - {redact_url(url)}: {exc}" for url, exc in errors)
        raise FetchError(
            f"asset {self.asset.name!r} ({self.asset.path}, sha256 {self.asset.sha256}) "
            f"could not be fetched; tried {len(errors)} source(s):\n{tried}\n"
            "  what to do: check the sources above; add --mirror PREFIX=REPLACEMENT for a copy with this "
            "sha256, or raise --attempts/--timeout/--deadline for a slow or flaky network"
        )

    def _from_source(self, source: Source) -> None:
        """Retry one source until its bytes verify into the cache; raises DownloadError when it gives up."""
        retry = self.retry
        self.connections = self.options.connections
        self.etag_splits = set()
        self.unranged = False
        fresh_retry = False
        self.partial.from_zero = not self.partial.written_total()
        shown = redact_url(source.url)
        while True:
            left = self.clock.remaining()
            if left is not None and left <= 0:
                raise self.clock.deadline_error(f"trying {shown}")
            before = self.partial.written_total()
            try:
                try:
                    unsized = self._attempt(source)
                    self.partial.verify(self.asset.sha256, shown)
                    return
                except ChecksumMismatch as exc:
                    if self._retry_from_zero(fresh_retry):
                        fresh_retry = True
                        continue
                    if unsized:  # most likely cut short, not wrong: worth another attempt
                        raise DownloadError(
                            f"{exc}; the body had no Content-Length and the manifest no size, so it may have "
                            "been cut short",
                            retryable=True,
                        ) from None
                    raise
            except DownloadError as exc:
                if isinstance(exc, BadRange) and not self.unranged:
                    log.warning(
                        "%s: %s answers Range requests wrongly (%s); "
                        "reading it as one plain stream from byte 0",
                        self.asset.name,
                        shown,
                        exc,
                    )
                    self.unranged = True
                    self.partial.discard()
                    continue
                if isinstance(exc, Changed):
                    self._start_over(exc, shown)
                progressed = self.partial.written_total() - before
                retry, delay = retry.after(exc, progressed, self.clock.remaining())
                log.warning("%s: %s: %s; retrying in %.1f s", self.asset.name, shown, exc, delay)
                self.clock.sleep(delay, f"waiting to retry {shown}")

    def _retry_from_zero(self, tried_already: bool) -> bool:
        """After a mismatch, discard the partial; return True when one clean try from zero is due."""
        resumed = not self.partial.from_zero
        self.partial.discard()
        if not resumed or tried_already:
            return False
        # Resumed bytes may be what is wrong (an earlier source, a power loss); one clean try.
        log.warning("%s: resumed download did not verify; fetching it again from zero", self.asset.name)
        return True

    def _start_over(self, exc: Changed, shown: str) -> None:
        log.warning("%s: %s", self.asset.name, exc)
        self.partial.discard()
        if len(self.etag_splits) >= 2 and self.connections > 1:
            # Once is a file replaced mid-download; twice is a mirror whose nodes tag the
            # same bytes differently. One connection asks one node; the sha256 decides.
            log.warning(
                "%s: %s answers with a different ETag per connection; using one connection",
                self.asset.name,
                shown,
            )
            self.connections = 1

    def _attempt(self, source: Source) -> bool:
        """One try at ``source``. Returns True when the body had no length to check it by."""
        if source.path is not None:
            FileAttempt(source, self.asset, self.partial, self.clock, self.session, self._hooks()).run()
            return False
        attempt = HttpAttempt(
            source,
            self.asset,
            self.partial,
            self.clock,
            self.session,
            self._hooks(),
            self.connections,
            unranged=self.unranged,
        )
        attempt.run()
        return attempt.unsized

    def _hooks(self) -> AttemptHooks:
        def count_attempt() -> None:
            self.attempts += 1

        def count_request() -> None:
            with self.lock:
                self.requests += 1

        def etag_split() -> None:
            with self.lock:
                self.etag_splits.add(self.attempts)

        return AttemptHooks(count_attempt, self._begin, self._advance, count_request, etag_split)

    def _begin(self, total: int | None) -> None:
        """Start the progress display once per asset, crediting bytes resumed from an earlier run."""
        if not self.progress_started:
            self.progress_started = True
            self.progress.start(self.asset, total)
            resumed = self.partial.written_total()
            if resumed:
                self.progress.advance(self.asset, resumed)


def os_failure(exc: OSError, asset: Asset, cache: Cache, partial: PartialFile) -> FetchError:
    """Name a file the fetch could not create, write or move, and the option that chose its place.

    Every step that can fail this way (the cache's lock, partial and objects, the
    destination) lands here, so a read-only or full directory is exit 3, not a traceback.
    """
    paths = [Path(p) for p in (exc.filename, exc.filename2) if p is not None]
    where = paths[0] if paths else cache.root
    subject = f"asset {asset.name!r}"
    if atomic.is_no_space(exc):
        need = (asset.size or 0) - partial.written_total()
        return atomic.no_space_error(subject, where, max(need, 0), NO_SPACE_ADVICE)
    option = "--cache-dir" if where.is_relative_to(cache.root) else "--dest"
    return FetchError(
        f"{subject}: cannot use {' or '.join(map(str, paths)) or where}: {exc.strerror or exc}; "
        f"make {option} writable (one filesystem), or point {option} at another directory"
    )

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
from bake.fetch.attempt import Attempt, AttemptHooks, HttpAttempt, encoding_note
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
        self.since: float | None = None  # when its clock starts, if not when it begins: see fetch_assets
        self.lock = threading.Lock()  # guards requests, counted from several connections
        self.requests = 0  # HTTP requests and file opens made for this asset
        self.attempts = 0
        self.progress_started = False
        self.waiting_logged = False

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
        self.clock.start(self.since)
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
        run = SourceRun(source, self.asset.name, self.partial, self.options.connections)
        while True:
            left = self.clock.remaining()
            if left is not None and left <= 0:
                raise self.clock.deadline_error(f"trying {run.shown}")
            before = self.partial.written_total()
            try:
                attempt = self._attempt(run)
                try:
                    self.partial.verify(self.asset.sha256, run.shown, any_digest=self.options.unknown_sha256)
                    return
                except ChecksumMismatch as exc:
                    run.mismatched(exc, attempt)  # raises, unless one clean try from zero is due
                    continue
            except DownloadError as exc:
                if isinstance(exc, BadRange) and run.read_plainly(exc):
                    continue
                if isinstance(exc, Changed):
                    run.start_over(exc)
                progressed = self.partial.written_total() - before
                retry, delay = retry.after(exc, progressed, self.clock.remaining())
                log.warning("%s: %s: %s; retrying in %.1f s", self.asset.name, run.shown, exc, delay)
                self.clock.sleep(delay, f"waiting to retry {run.shown}")

    def _attempt(self, run: SourceRun) -> Attempt:
        """One try at ``run``'s source; returns the attempt, which tells how the body came."""
        hooks = AttemptHooks(
            self._count_attempt, self._begin, self._advance, self._count_request, run.etag_split, run.changed
        )
        if run.source.path is not None:
            attempt = FileAttempt(run.source, self.asset, self.partial, self.clock, self.session, hooks)
        else:
            attempt = HttpAttempt(
                run.source,
                self.asset,
                self.partial,
                self.clock,
                self.session,
                hooks,
                run.connections,
                unranged=run.unranged,
            )
        attempt.run()
        return attempt

    def _count_attempt(self) -> None:
        self.attempts += 1

    def _count_request(self) -> None:
        with self.lock:
            self.requests += 1

    def _begin(self, total: int | None) -> None:
        """Start the progress display once per asset, crediting bytes resumed from an earlier run."""
        if not self.progress_started:
            self.progress_started = True
            self.progress.start(self.asset, total)
            resumed = self.partial.written_total()
            if resumed:
                self.progress.advance(self.asset, resumed)


class SourceRun:
    """What one source has shown in this run, and what the job does about its failures.

    How many connections it gets, whether it answers ranges rightly, whether its
    file was replaced mid-download, whether a clean try from zero is still due.
    """

    def __init__(self, source: Source, asset_name: str, partial: PartialFile, connections: int) -> None:
        self.source = source
        self.shown = redact_url(source.url)
        self.asset_name = asset_name
        self.partial = partial
        self.connections = connections
        self.unranged = False  # it answered a Range wrongly: ask it for the whole file only
        self.change: str | None = None  # how a replacement of its file showed (ETag a -> b, ...)
        self.fresh_retry = False  # the one clean try from zero after a resumed mismatch was made
        self.lock = threading.Lock()  # guards splits, told from several connections
        self.splits: set[int] = set()  # attempts whose connections saw other ETags
        self.attempt_no = 0
        partial.from_zero = not partial.written_total()

    def etag_split(self) -> None:
        with self.lock:
            self.splits.add(self.attempt_no)

    def changed(self, how: str) -> None:
        self.change = how

    def read_plainly(self, exc: BadRange) -> bool:
        """After a wrong answer to a Range: one plain stream from byte 0, said once. False if done already."""
        if self.unranged:
            return False
        log.warning(
            "%s: %s answers Range requests wrongly (%s); reading it as one plain stream from byte 0",
            self.asset_name,
            self.shown,
            exc,
        )
        self.unranged = True
        self.partial.discard()
        return True

    def start_over(self, exc: Changed) -> None:
        log.warning("%s: %s", self.asset_name, exc)
        self.partial.discard()
        self.attempt_no += 1
        if exc.validator:
            self.change = exc.validator
        if len(self.splits) >= 2 and self.connections > 1:
            # Once is a file replaced mid-download; twice is a mirror whose nodes tag the
            # same bytes differently. One connection asks one node; the sha256 decides.
            log.warning(
                "%s: %s answers with a different ETag per connection; using one connection",
                self.asset_name,
                self.shown,
            )
            self.connections = 1

    def mismatched(self, exc: ChecksumMismatch, attempt: Attempt) -> None:
        """After a sha256 mismatch: return when one clean try from zero is due; else raise, saying why."""
        resumed = not self.partial.from_zero
        self.partial.discard()
        if attempt.encoding:
            raise DownloadError(f"{exc}; {encoding_note(attempt.encoding)}", retryable=False) from None
        if (resumed or attempt.unvouched) and not self.fresh_retry:
            # Resumed bytes may be what is wrong (an earlier source, a power loss), or a length
            # nothing confirmed may have cut the body short: one clean try from zero.
            why = "resumed download" if resumed else "download whose length only its Content-Length gave"
            log.warning("%s: %s did not verify; fetching it again from zero", self.asset_name, why)
            self.fresh_retry = True
            return
        if self.change:
            raise DownloadError(
                f"{exc}; the file at this URL changed during the download ({self.change}), so the manifest "
                "may name an earlier version: compare its sha256 with what the server serves now",
                retryable=False,
            ) from None
        if attempt.unsized:  # most likely cut short, not wrong: worth another attempt
            raise DownloadError(
                f"{exc}; the body had no Content-Length and the manifest no size, "
                "so it may have been cut short",
                retryable=True,
            ) from None
        raise exc


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

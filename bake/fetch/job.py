"""Fetching one asset: the destination or the cache first, else each source in turn under a retry policy.

The job only orchestrates. Its parts each own one thing: the clock (deadline,
stall timeout, cancel), the retry policy, the partial file, one HTTP attempt,
the segmented transfer, and the install.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from pathlib import Path

from bake import atomic
from bake.asset import Asset
from bake.cache import Cache
from bake.errors import ChecksumMismatch, DownloadError, FetchError
from bake.fetch import install
from bake.fetch.attempt import Attempt, AttemptContext, AttemptHooks, HttpAttempt, encoding_note
from bake.fetch.clock import Clock
from bake.fetch.failures import (
    NO_SPACE_ADVICE,
    BadRange,
    Changed,
    DeadlineExceeded,
    DiskBound,
    GaveUp,
    SizeMismatch,
    SourcesFailed,
    Unusable,
)
from bake.fetch.local import FileAttempt
from bake.fetch.options import FetchOptions, FetchRecord
from bake.fetch.partial import DiskBounds, PartialFile
from bake.fetch.progress import Progress
from bake.fetch.retry import RetryPolicy
from bake.fetch.session import Session
from bake.fetch.sources import Source, candidate_urls, resolve_source
from bake.hashes import file_matches
from bake.urls import redact_url

log = logging.getLogger(__name__)


class AssetJob:
    """Everything about fetching one asset in this run.

    ``dirs`` (``--dest`` and the directories made under it) None fetches into the cache only
    (``bake add``). With ``options.unknown_sha256`` the asset's sha256 is only the key of its
    partial, and the object is committed under the digest of the bytes that arrived
    (``FetchRecord.sha256``).
    """

    def __init__(
        self,
        asset: Asset,
        urls: list[str],
        dirs: install.DestDirs | None,
        cache: Cache,
        session: Session,
        progress: Progress,
        retry: RetryPolicy,
    ) -> None:
        self.asset = asset
        self.urls = urls
        self.dirs = dirs
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
        # Only a size the manifest vouches for bounds a download; without one, the options do.
        bounds = None
        if asset.size is None:
            bounds = DiskBounds(self.options.max_size, self.options.min_free, not self.options.unknown_sha256)
        self.partial = PartialFile(cache, asset.sha256, asset.name, bounds)
        self.proofs = other_files(asset, self.options)  # a Hub blob's other paths, each proven at its source
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
        target = install.target_path(self.dirs.dest, self.asset) if self.dirs else None
        if target is not None and install.already_installed(target, self.asset):
            log.debug("%s: %s already verified", self.asset.name, target)
            return self._record("cache", sha, target, cached=True)
        obj = self.cache.object_path(sha)
        if not self.options.unknown_sha256:
            with self.cache.lock(sha, shared=True, wait=self._wait_lock):
                if obj.exists() and self._place(obj, target, verify=True):
                    return self._record("cache", sha, obj, cached=True)
        with self.cache.lock(sha, wait=self._wait_lock):
            if obj.exists() and not self.options.unknown_sha256:
                if self._place(obj, target, verify=True):
                    return self._record("cache", sha, obj, cached=True)
                log.warning(
                    "%s: cache entry %s does not match its sha256; fetching again", self.asset.name, obj
                )
                obj.unlink()
            source, sha = self._download()
            obj = self.cache.object_path(sha)
            self._place(obj, target, verify=False)
        if self.requests == 0:
            source = "cache"  # a complete partial from an earlier run only needed verifying
        return self._record(source, sha, obj, cached=self.requests == 0)

    def _place(self, obj: Path, target: Path | None, *, verify: bool) -> bool:
        """Install ``obj`` at ``target``; with no destination, check only (a cache-only fetch)."""
        if target is None:
            return not verify or file_matches(obj, self.asset.sha256)
        return install.install(obj, target, self.asset, self.dirs, verify=verify)

    def _record(self, source: str, sha256: str, landed: Path, *, cached: bool) -> FetchRecord:
        size = self.asset.size if self.asset.size is not None else landed.stat().st_size
        return FetchRecord(
            name=self.asset.name,
            path=self.asset.path,
            source=redact_url(source),
            bytes=self.partial.received,
            size=size,
            seconds=self.clock.elapsed(),
            attempts=self.attempts,
            cached=cached,
            sha256=sha256,
        )

    def _wait_lock(self, seconds: float) -> None:
        if not self.waiting_logged:
            log.info("%s: another bake process is fetching it; waiting for it to finish", self.asset.name)
            self.waiting_logged = True
        self.clock.sleep(seconds, "waiting for another process to finish fetching it")

    # -- downloading ----------------------------------------------------------

    def _download(self) -> tuple[str, str]:
        """Fill the cache object from the first source that delivers the right bytes.

        A Hub blob that backs several files is then fetched through each other file's own
        sources too: every path must serve these bytes, not only the first. Returns the
        source used and the sha256 the object was committed under.
        """
        source, sha = self._from_sources(self.urls)
        advance, self._advance = self._advance, _no_progress  # the asset is in the cache: 100% is shown
        try:
            for url, urls in self.proofs:
                if source not in urls:
                    log.info("%s: checking that %s serves the same bytes", self.asset.name, redact_url(url))
                    self._from_sources(urls)
        finally:
            self._advance = advance
        return source, sha

    def _from_sources(self, urls: list[str]) -> tuple[str, str]:
        """Try ``urls`` in turn until one verifies into the cache; return it and the committed sha256."""
        self.partial.open()
        errors: list[tuple[str, DownloadError]] = []
        try:
            for url in urls:
                try:
                    return url, self._from_source(resolve_source(url, self.options))
                except DeadlineExceeded as exc:
                    errors.append((url, exc))
                    break
                except DiskBound as exc:
                    self.partial.discard()  # bytes past the cap, or the disk they hold, are no use to a rerun
                    errors.append((url, exc))
                    if exc.disk:
                        break
                except DownloadError as exc:
                    errors.append((url, exc))  # stated once, in the error that ends the asset
                    if url != urls[-1]:
                        log.warning("%s: %s failed; trying the next source", self.asset.name, redact_url(url))
        finally:
            self.partial.close()
        raise fetch_failure(self.asset, errors, known=not self.options.unknown_sha256)

    def _from_source(self, source: Source) -> str:
        """Retry one source until its bytes verify into the cache; return the sha256 they went in under.

        Raises DownloadError when it gives up.
        """
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
                    expected = None if self.options.unknown_sha256 else self.asset.sha256
                    return self.partial.verify(expected, run.shown)
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
            count_attempt=self._count_attempt,
            begin=self._begin,
            advance=self._advance,
            count_request=self._count_request,
            etag_split=run.etag_split,
            changed=run.changed,
        )
        context = AttemptContext(
            source=run.source,
            asset=self.asset,
            partial=self.partial,
            clock=self.clock,
            session=self.session,
            hooks=hooks,
        )
        log.debug(
            "%s: attempt %d at %s (%d bytes in the partial, %s s left)",
            self.asset.name,
            self.attempts + 1,
            run.shown,
            self.partial.written_total(),
            "unbounded" if (left := self.clock.remaining()) is None else f"{left:.0f}",
        )
        if run.source.path is not None:
            attempt = FileAttempt(context)
        elif wants_huggingface_hub(self.asset, run.source.url):
            from bake.fetch.hub_download import HubAttempt  # huggingface_hub loads only for such an entry

            attempt = HubAttempt(context)
        else:
            attempt = HttpAttempt(context, connections=run.connections, unranged=run.unranged)
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
                self.progress.resumed(self.asset, resumed)


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
        """After a sha256 mismatch: return when one clean try from zero is due; else raise, saying why.

        A file that came whole from this source in this run is not fetched from it again (the same
        bytes would come): its bytes stay in the cache under their own sha256, and the error says so.
        Whole means its length was vouched for (the manifest's size, a Content-Range), or, when one
        Content-Length alone gave it, the source confirms it when asked once more (no body read).
        """
        resumed = not self.partial.from_zero
        if attempt.encoding:
            self.partial.discard()
            raise DownloadError(f"{exc}; {encoding_note(attempt.encoding)}", retryable=False) from None
        size = self.partial.state.size
        if not self.fresh_retry and (resumed or (attempt.unvouched and not attempt.confirms_length(size))):
            # Resumed bytes (an earlier run's, an earlier source's, a power loss) may be what is wrong;
            # or a length only one Content-Length gave, which the source now contradicts, cut the body.
            why = "resumed download" if resumed else "download whose length the source now contradicts"
            self.partial.discard()
            log.warning("%s: a %s did not verify; fetching it again from zero", self.asset_name, why)
            self.fresh_retry = True
            return
        if self.change:
            self.partial.discard()
            raise DownloadError(
                f"{exc}; the file at this URL changed during the download ({self.change}), so the manifest "
                "may name an earlier version: compare its sha256 with what the server serves now",
                retryable=False,
            ) from None
        if attempt.unsized:  # no length to check: most likely cut short, not wrong; worth another attempt
            self.partial.discard()
            raise DownloadError(
                f"{exc}; the body had no Content-Length and the manifest no size, "
                "so it may have been cut short",
                retryable=True,
            ) from None
        self.partial.keep(exc.actual)
        raise ChecksumMismatch(
            exc.expected, exc.actual, exc.source, asset=exc.asset, kept_size=size
        ) from None


def _no_progress(n: int) -> None:
    """Bytes that prove another path of a blob already in the cache: no progress to show."""


def wants_huggingface_hub(asset: Asset, url: str) -> bool:
    """True when ``url`` is a file of a ``[[hub]]`` entry that asks for huggingface_hub's downloader."""
    uses = asset.hub.uses if asset.hub is not None else ()
    return any(entry.downloader == "huggingface_hub" and entry.url(path) == url for entry, path in uses)


def other_files(asset: Asset, options: FetchOptions) -> list[tuple[str, list[str]]]:
    """For a Hub blob backing several files: each file's URL with its own sources (rewrites first).

    Raises UsageError, before any traffic, when ``--no-origin`` leaves one of them no source.
    """
    if asset.hub is None or len(asset.urls) < 2:
        return []
    return [(url, candidate_urls(dataclasses.replace(asset, urls=(url,)), options)) for url in asset.urls]


def fetch_failure(asset: Asset, errors: list[tuple[str, DownloadError]], *, known: bool = True) -> FetchError:
    """The error of an asset no source delivered: every source tried, then what to do, one line each.

    ``known`` False: the asset's sha256 is only a cache key (bake add), so it is not shown.
    """
    tried = "\n".join(f"  - {_source_line(url, exc)}" for url, exc in errors)
    advice = dict.fromkeys(_advice(url, exc, known) for url, exc in errors)
    todo = "\n".join(f"    - {line}" for line in advice)
    what = f"asset {asset.name!r} ({asset.path}, sha256 {asset.sha256})" if known else f"{asset.name!r}"
    return SourcesFailed(
        f"{what} could not be fetched; tried {len(errors)} source(s):\n{tried}\n  what to do:\n{todo}", errors
    )


def _source_line(url: str, exc: DownloadError) -> str:
    """``URL: what went wrong``, the URL said once even when the error names it too."""
    shown, text = redact_url(url), str(exc)
    return text if text.startswith(shown) else f"{shown}: {text}"


def _advice(url: str, exc: DownloadError, known: bool) -> str:
    """What to do about one source's failure (a 404 needs another URL, not more attempts).

    ``known`` False is ``bake add``: there is no manifest entry yet, only the URL given.
    """
    the_url = "the URL in the manifest" if known else "the URL given to bake add"
    copy = "a copy with this sha256" if known else "a copy of the file"
    if isinstance(exc, Unusable):
        return exc.advice
    if getattr(exc, "kept_size", None) is not None:  # a whole file, other bytes: which side is wrong?
        return (
            f'if the file changed upstream on purpose, check it, then set sha256 = "{exc.actual}" in the '
            "manifest: the next fetch installs the kept bytes with no download; otherwise fix the "
            "source, or remove it from the entry's urls"
        )
    if isinstance(getattr(exc, "cause", exc), SizeMismatch):
        return (
            "if this source serves the right file, correct size (and sha256) of the entry in the manifest "
            "(bake add --size-only NAME fills in a size); otherwise correct its URL"
        )
    if isinstance(exc, DeadlineExceeded):
        return "raise --deadline, or add a faster --mirror PREFIX=REPLACEMENT"
    if getattr(exc, "status", None) in (404, 410):
        return (
            f"{redact_url(url)} does not have the file: correct {the_url}, or add "
            f"--mirror PREFIX=REPLACEMENT for {copy}"
        )
    if isinstance(exc, GaveUp):
        return (
            "for a slow or flaky network, raise --attempts or --timeout, or add a --mirror PREFIX=REPLACEMENT"
        )
    if isinstance(exc, DiskBound):
        return "raise the bound it names" + (", or give the asset its size in the manifest" if known else "")
    return f"fix the source as its line says, or add --mirror PREFIX=REPLACEMENT for {copy}"


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

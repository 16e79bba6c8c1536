"""Verified downloads: mirrors, retries, resume, segmented transfers and a shared content-addressed cache.

The flow for one asset: an existing verified file at the destination or in the
cache costs no network. Otherwise, under the cache's lock for its sha256, each
candidate URL is tried in turn. A source gets retries with backoff; a transfer
resumes from the partial kept in the cache; the SHA-256 follows the bytes as
they land. A verified partial becomes a cache object, which reaches the
destination through a staging file next to the target and an atomic rename.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import hashlib
import http.client
import itertools
import logging
import os
import random
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from bake.cache import Cache, PartialState
from bake.errors import ChecksumMismatch, DownloadError, FetchError, NoSpaceError, UsageError
from bake.hashes import sha256_file
from bake.manifest import Asset, redact_url
from bake.progress import Progress
from bake.segments import (
    HASH_BLOCK,
    LATER,
    MIB,
    PROBE,
    READ_BUF,
    Aborted,
    Changed,
    Claim,
    PrefixHasher,
    Ranges,
    Transfer,
    piece_size,
)
from bake.sources import Source, candidate_urls, parse_mirrors, resolve_source
from bake.transport import HttpClient, describe_error, make_ssl_context, parse_content_range

__all__ = [
    "DEFAULT_CONNECTIONS",
    "FetchFailed",
    "FetchOptions",
    "FetchRecord",
    "candidate_urls",
    "fetch_assets",
    "parse_mirrors",
]

log = logging.getLogger(__name__)

# Four connections per asset. A single stream is what a per-connection
# throttle (the ~2 MiB/s mirror in the brief) caps, so more connections buy
# near-linear speed; four stays below the six per host that browsers open and
# servers are sized for, so a public mirror sees a polite client. Raise it with
# --connections for a mirror you run yourself.
DEFAULT_CONNECTIONS = 4

BACKOFF_BASE = 0.5  # first retry waits 0.25-0.5 s, doubling per failure ...
BACKOFF_CAP = 30.0  # ... up to 15-30 s
_SAVE_EVERY = 0.25  # seconds between progress-file writes: a SIGKILL loses at most this much transfer
_HASH_SLICE = 64 * MIB  # hashing per keeper tick, so progress keeps being saved
_PROGRESS_BYTES = 256 * 1024  # an attempt that added this much is progress, not a failure
_STAGING_MARK = ".bake-staging."
_staging_counter = itertools.count()


@dataclass(frozen=True)
class FetchOptions:
    """How to fetch: cache, mirrors, network limits and retry budget.

    ``attempts`` bounds the failed attempts in a row, per source, that made no
    progress; an attempt that added bytes to the partial resets the count, so a
    slow but moving transfer is bounded by ``deadline`` instead.
    """

    cache_dir: Path
    mirrors: tuple[tuple[str, str], ...] = ()
    no_origin: bool = False
    connections: int = DEFAULT_CONNECTIONS
    attempts: int = 5
    timeout: float = 30.0
    deadline: float | None = None
    allow_http: bool = False
    ca_bundle: str | None = None
    jobs: int = 4
    # bake add: each asset's sha256 is only the cache key of a file whose hash is not known
    # yet, so its bytes are kept whatever they hash to; the caller hashes them.
    unknown_sha256: bool = False


@dataclass(frozen=True)
class FetchRecord:
    """One installed asset: where it came from, bytes moved over the network this run, time and attempts."""

    name: str
    path: str
    source: str
    bytes: int
    size: int
    seconds: float
    attempts: int
    cached: bool


class FetchFailed(FetchError):
    """Some assets could not be fetched; every other asset was installed.

    ``failures`` maps each failed asset's name to its error; ``records`` holds
    the assets that did land.
    """

    def __init__(self, failures: dict[str, FetchError], records: list[FetchRecord]) -> None:
        self.failures = failures
        self.records = records
        total = len(failures) + len(records)
        lines = [f"{len(failures)} of {total} asset(s) could not be fetched:"]
        lines += [str(err) for err in failures.values()]
        super().__init__("\n".join(lines))


class _DeadlineExceeded(DownloadError):
    """The asset's wall-clock deadline passed; no further source is tried."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class _Cancelled(Exception):
    """The run was interrupted (Ctrl-C); partials stay in the cache."""


def fetch_assets(
    assets: Sequence[Asset], dest: Path, options: FetchOptions, progress: Progress | None = None
) -> list[FetchRecord]:
    """Fetch, verify and install every asset under ``dest``, ``options.jobs`` at a time.

    Returns one FetchRecord per asset, in input order. Every asset that can be
    fetched is installed even when others fail; then FetchFailed is raised,
    naming each failed asset with every source tried. UsageError/ManifestError
    come before any network traffic; NoSpaceError failures are among
    FetchFailed's. Ctrl-C stops all transfers, keeps their partials, and
    re-raises KeyboardInterrupt.
    """
    if options.connections < 1 or options.attempts < 1 or options.jobs < 1:
        raise UsageError("connections, attempts and jobs must each be at least 1")
    if options.timeout <= 0 or (options.deadline is not None and options.deadline <= 0):
        raise UsageError("timeout and deadline must be positive numbers of seconds")
    plans = [(asset, candidate_urls(asset, options)) for asset in assets]
    net = _Net(options)
    if any(urlsplit(u).scheme.lower() in ("https", "hf") for _, urls in plans for u in urls):
        net.ssl_context()  # a bad CA bundle is a usage error, reported before anything is made
    cache = Cache(options.cache_dir)
    cache.ensure()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    jobs = [_Job(asset, urls, dest, cache, net, progress or Progress()) for asset, urls in plans]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs, thread_name_prefix="bake-fetch")
    futures = [pool.submit(job.run) for job in jobs]
    try:
        concurrent.futures.wait(futures)
    except BaseException:
        net.cancel_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    records: list[FetchRecord] = []
    failures: dict[str, FetchError] = {}
    for job, future in zip(jobs, futures, strict=True):
        exc = future.exception()
        if exc is None:
            records.append(future.result())
        elif isinstance(exc, FetchError):
            failures[job.asset.name] = exc
        else:
            raise exc  # a bug or a usage error is never reported as a fetch failure
    if failures:
        raise FetchFailed(failures, records)
    return records


class _Net:
    """What every transfer of one run shares: options, TLS context, and the way to stop them all."""

    def __init__(self, options: FetchOptions) -> None:
        self.options = options
        self.cancel = threading.Event()
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None
        self._transfers: set[Transfer] = set()

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context (ca_bundle, else SSL_CERT_FILE, else the system store), made on first use."""
        with self._lock:
            if self._ssl is None:
                self._ssl = make_ssl_context(self.options)
            return self._ssl

    def register(self, transfer: Transfer) -> None:
        with self._lock:
            self._transfers.add(transfer)
        if self.cancel.is_set():
            transfer.fail(_Cancelled("interrupted"))

    def unregister(self, transfer: Transfer) -> None:
        with self._lock:
            self._transfers.discard(transfer)

    def cancel_all(self) -> None:
        self.cancel.set()
        with self._lock:
            transfers = list(self._transfers)
        for transfer in transfers:
            transfer.fail(_Cancelled("interrupted"))


def _backoff(step: int) -> float:
    """Exponential backoff with equal jitter: half fixed, half random, capped."""
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**step)
    return delay / 2 + random.uniform(0, delay / 2)


def _free_bytes(path: Path) -> int:
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            st = os.statvfs(candidate)
            return st.f_bavail * st.f_frsize
    return 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Job:
    """Everything about fetching one asset in this run."""

    def __init__(
        self, asset: Asset, urls: list[str], dest: Path, cache: Cache, net: _Net, progress: Progress
    ) -> None:
        self.asset = asset
        self.urls = urls
        self.dest = dest
        self.cache = cache
        self.net = net
        self.options = net.options
        self.progress = progress
        self.lock = threading.Lock()
        self.done = Ranges()
        self.meta = PartialState()
        self.hasher = PrefixHasher()
        self.fd: int | None = None
        self.bytes = 0
        self.requests = 0  # HTTP requests and file opens made for this asset
        self.attempts = 0
        self.started = False
        self.from_zero = True  # every byte in the partial came from the current attempt series' clean start
        self.unsized = False  # the last body had no length to check, so an early close looked like its end
        self.waiting_logged = False
        self.connections = self.options.connections  # for the current source; see _from_source
        self.etag_splits: set[int] = set()  # attempts at this source whose connections saw other ETags
        self.t0 = time.monotonic()
        self.deadline: float | None = None

    # -- time -------------------------------------------------------------

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def deadline_error(self, doing: str) -> _DeadlineExceeded:
        return _DeadlineExceeded(
            f"asset {self.asset.name!r}: deadline of {self.options.deadline:g} s passed while {doing}; "
            "raise --deadline, or use a faster mirror"
        )

    def io_timeout(self) -> float:
        """The socket timeout for the next operation: the stall timeout, cut short by the deadline."""
        left = self.remaining()
        if left is None:
            return self.options.timeout
        if left <= 0:
            raise self.deadline_error("transferring")
        return min(self.options.timeout, left)

    def stall_error(self, doing: str) -> DownloadError:
        left = self.remaining()
        if left is not None and left <= 0.01:
            return self.deadline_error(doing)
        return DownloadError(
            f"no data for {self.options.timeout:g} s while {doing} (stalled)", retryable=True
        )

    def sleep(self, seconds: float, doing: str) -> None:
        """Wait, waking early for Ctrl-C; never past the deadline."""
        left = self.remaining()
        if left is not None and seconds >= left:
            if self.net.cancel.wait(max(0.0, left)):
                raise _Cancelled("interrupted")
            raise self.deadline_error(doing)
        if self.net.cancel.wait(seconds):
            raise _Cancelled("interrupted")

    def wait_lock(self, seconds: float) -> None:
        if not self.waiting_logged:
            log.info("%s: another bake process is fetching it; waiting for it to finish", self.asset.name)
            self.waiting_logged = True
        self.sleep(seconds, "waiting for another process to finish fetching it")

    # -- the whole asset ----------------------------------------------------

    def run(self) -> FetchRecord:
        try:
            record = self._run()
        except FetchError as exc:
            self.progress.failed(self.asset, exc)
            raise
        self.progress.done(record)
        return record

    def _run(self) -> FetchRecord:
        if self.net.cancel.is_set():
            raise _Cancelled("interrupted")
        self.t0 = time.monotonic()
        if self.options.deadline is not None:
            self.deadline = self.t0 + self.options.deadline
        sha = self.asset.sha256
        target = self._target()
        if self._dest_matches(target):
            log.debug("%s: %s already verified", self.asset.name, target)
            return self._record("cache", target, cached=True)
        obj = self.cache.object_path(sha)
        with self.cache.lock(sha, shared=True, wait=self.wait_lock):
            if obj.exists() and self._install(obj, target, verify=True):
                return self._record("cache", target, cached=True)
        with self.cache.lock(sha, wait=self.wait_lock):
            if obj.exists():
                if self._install(obj, target, verify=True):
                    return self._record("cache", target, cached=True)
                log.warning(
                    "%s: cache entry %s does not match its sha256; fetching again", self.asset.name, obj
                )
                obj.unlink()
            source = self._download()
            self._install(obj, target, verify=False)
        if self.requests == 0:
            source = "cache"  # a complete partial from an earlier run only needed verifying
        return self._record(source, target, cached=self.requests == 0)

    def _record(self, source: str, target: Path, *, cached: bool) -> FetchRecord:
        size = self.asset.size if self.asset.size is not None else target.stat().st_size
        return FetchRecord(
            name=self.asset.name,
            path=self.asset.path,
            source=redact_url(source),
            bytes=self.bytes,
            size=size,
            seconds=time.monotonic() - self.t0,
            attempts=self.attempts,
            cached=cached,
        )

    def _target(self) -> Path:
        """The asset's path under dest; refuses one that a symlink would carry outside dest."""
        target = self.dest.joinpath(*PurePosixPath(self.asset.path).parts)
        root = os.path.realpath(self.dest)
        parent = os.path.realpath(target.parent)
        if parent != root and not parent.startswith(root + os.sep):
            raise FetchError(
                f"asset {self.asset.name!r}: {target} would land in {parent}, outside --dest {root}, "
                "through a symlink; remove that link from the destination"
            )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FetchError(
                f"asset {self.asset.name!r}: cannot create {target.parent}: "
                f"{exc.strerror or exc}; check --dest"
            ) from None
        return target

    def _dest_matches(self, target: Path) -> bool:
        try:
            st = target.lstat()
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            log.warning("%s: %s is not a regular file; replacing it", self.asset.name, target)
            return False
        if self.asset.size is not None and st.st_size != self.asset.size:
            log.warning(
                "%s: %s has %d bytes, expected %d; replacing it",
                self.asset.name,
                target,
                st.st_size,
                self.asset.size,
            )
            return False
        if sha256_file(target) == self.asset.sha256:
            return True
        log.warning(
            "%s: %s does not match sha256 %s; replacing it", self.asset.name, target, self.asset.sha256
        )
        return False

    # -- installing -----------------------------------------------------------

    def _install(self, obj: Path, target: Path, *, verify: bool) -> bool:
        """Put ``obj`` at ``target`` through a staging file next to it: (verify,) fsync, rename, fsync dir.

        Same filesystem: a hard link, which costs no copy. Otherwise a copy.
        Returns False, leaving nothing behind, when ``verify`` finds a mismatch.
        """
        _clear_stale_staging(target)
        staging = target.with_name(
            f".{target.name}{_STAGING_MARK}{socket.gethostname()}.{os.getpid()}.{next(_staging_counter)}"
        )
        try:
            try:
                os.link(obj, staging)
                linked = True
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.EACCES):
                    raise
                linked = False
            if linked:
                if verify and sha256_file(staging) != self.asset.sha256:
                    return False
            elif not self._copy(obj, staging, verify):
                return False
            fd = os.open(staging, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(staging, target)
            _fsync_dir(target.parent)
            return True
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise self._no_space(target, obj.stat().st_size) from None
            raise FetchError(
                f"asset {self.asset.name!r}: cannot install {target}: {exc.strerror or exc}; "
                "check that --dest is writable and the path is not a directory"
            ) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()

    def _copy(self, src: Path, dst: Path, verify: bool) -> bool:
        digest = hashlib.sha256()
        with open(src, "rb") as fin:
            size = os.fstat(fin.fileno()).st_size
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                if size:
                    os.posix_fallocate(fd, 0, size)  # ENOSPC now, not half-way through
                if not verify:
                    offset = 0
                    while offset < size:  # in-kernel copy; the bytes were verified a moment ago
                        offset += os.sendfile(fd, fin.fileno(), offset, size - offset)
                    return True
                buf = bytearray(HASH_BLOCK)
                while n := fin.readinto(buf):
                    view = memoryview(buf)[:n]
                    digest.update(view)
                    os.write(fd, view)
            finally:
                os.close(fd)
        return digest.hexdigest() == self.asset.sha256

    def _no_space(self, where: Path, need: int) -> NoSpaceError:
        return NoSpaceError(
            f"asset {self.asset.name!r}: no space left on the device of {where}: need {need} bytes "
            f"({need / MIB:.1f} MiB), {_free_bytes(where.parent)} bytes available; free some space, "
            "or point --dest / --cache-dir at a larger filesystem"
        )

    # -- downloading ----------------------------------------------------------

    def _download(self) -> str:
        """Fill the cache object from the first source that delivers the right bytes. Returns that source."""
        self._open_partial()
        errors: list[tuple[str, DownloadError]] = []
        try:
            for url in self.urls:
                try:
                    self._from_source(resolve_source(url, self.options))
                    return url
                except _DeadlineExceeded as exc:
                    errors.append((url, exc))
                    break
                except DownloadError as exc:
                    log.warning("%s: %s: %s", self.asset.name, redact_url(url), exc)
                    errors.append((url, exc))
        finally:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
                if not self.done.spans:
                    self.cache.discard_partial(self.asset.sha256)  # nothing worth resuming
        tried = "\n".join(f"  - {redact_url(url)}: {exc}" for url, exc in errors)
        raise FetchError(
            f"asset {self.asset.name!r} ({self.asset.path}, sha256 {self.asset.sha256}) "
            f"could not be fetched; tried {len(errors)} source(s):\n{tried}\n"
            "  what to do: check the sources above; add --mirror PREFIX=REPLACEMENT for a copy with this "
            "sha256, or raise --attempts/--timeout/--deadline for a slow or flaky network"
        )

    def _open_partial(self) -> None:
        sha = self.asset.sha256
        path = self.cache.partial_path(sha)
        state = self.cache.load_state(sha)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        have = os.fstat(self.fd).st_size
        if state is None or any(end > have for _, end in state.done):
            os.ftruncate(self.fd, 0)
            state = PartialState()
        self.meta = state
        self.done = Ranges(state.done)
        self.hasher = PrefixHasher()
        if state.done:
            log.info("%s: resuming; %.1f MiB already in the cache", self.asset.name, self.done.total() / MIB)

    def _discard(self) -> None:
        self.from_zero = True
        os.ftruncate(self.fd, 0)
        with self.lock:
            self.done = Ranges()
        self.meta = PartialState()
        self.hasher = PrefixHasher()
        with contextlib.suppress(FileNotFoundError):
            self.cache.state_path(self.asset.sha256).unlink()

    def _save_state(self) -> None:
        with self.lock:
            state = PartialState(self.meta.size, self.meta.url, self.meta.etag, list(self.done.spans))
        try:
            self.cache.save_state(self.asset.sha256, state)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise self._no_space(self.cache.state_path(self.asset.sha256), 4096) from None
            raise

    def _from_source(self, source: Source) -> None:
        """Retry one source until its bytes verify into the cache; raises DownloadError when it gives up."""
        idle_failures = 0
        step = 0
        self.connections = self.options.connections
        self.etag_splits = set()
        fresh_retry = False
        with self.lock:
            self.from_zero = not self.done.spans
        while True:
            if self.remaining() is not None and self.remaining() <= 0:
                raise self.deadline_error(f"trying {redact_url(source.url)}")
            with self.lock:
                before = self.done.total()
            self.unsized = False
            try:
                try:
                    if source.path is not None:
                        self._copy_file(source)
                    else:
                        self._attempt(source)
                    self._verify(source)
                    return
                except ChecksumMismatch as exc:
                    resumed = not self.from_zero
                    self._discard()
                    if resumed and not fresh_retry:
                        # Resumed bytes may be what is wrong (an earlier source, a power loss); one clean try.
                        log.warning(
                            "%s: resumed download did not verify; fetching it again from zero",
                            self.asset.name,
                        )
                        fresh_retry = True
                        continue
                    if self.unsized:  # most likely cut short, not wrong: worth another attempt
                        raise DownloadError(
                            f"{exc}; the body had no Content-Length and the manifest no size, so it may have "
                            "been cut short",
                            retryable=True,
                        ) from None
                    raise
            except DownloadError as exc:
                if isinstance(exc, Changed):
                    log.warning("%s: %s", self.asset.name, exc)
                    self._discard()
                    if len(self.etag_splits) >= 2 and self.connections > 1:
                        # Once is a file replaced mid-download; twice is a mirror whose nodes tag the
                        # same bytes differently. One connection asks one node; the sha256 decides.
                        log.warning(
                            "%s: %s answers with a different ETag per connection; using one connection",
                            self.asset.name,
                            redact_url(source.url),
                        )
                        self.connections = 1
                if not exc.retryable:
                    raise
                with self.lock:
                    progressed = self.done.total() - before >= _PROGRESS_BYTES
                if progressed:
                    idle_failures, step = 0, 0
                else:
                    idle_failures += 1
                if idle_failures >= self.options.attempts:
                    raise DownloadError(
                        f"{exc} (gave up after {self.options.attempts} attempts in a row without progress)",
                        retryable=False,
                    ) from None
                retry_after = getattr(exc, "retry_after", None)
                delay = retry_after if retry_after is not None else _backoff(step)
                step += 1
                left = self.remaining()
                if retry_after is not None and left is not None and retry_after > left:
                    raise DownloadError(
                        f"{exc}; it asks to retry in {retry_after:g} s, past this asset's deadline",
                        retryable=False,
                    ) from None
                log.warning(
                    "%s: %s: %s; retrying in %.1f s", self.asset.name, redact_url(source.url), exc, delay
                )
                self.sleep(delay, f"waiting to retry {redact_url(source.url)}")

    def _check_size(self, source: Source, total: int, *, retryable: bool = True) -> None:
        if self.asset.size is not None and total != self.asset.size:
            raise DownloadError(
                f"{redact_url(source.url)} serves {total} bytes; the manifest says {self.asset.size}",
                retryable=retryable,
            )

    def _begin(self, total: int | None) -> None:
        if not self.started:
            self.started = True
            self.progress.start(self.asset, total)
            with self.lock:
                resumed = self.done.total()
            if resumed:
                self.progress.advance(self.asset, resumed)

    def _preallocate(self, size: int) -> None:
        st = os.fstat(self.fd)
        if size == 0 or st.st_blocks * 512 >= size:
            return
        try:
            os.posix_fallocate(self.fd, 0, size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                os.ftruncate(self.fd, st.st_size)  # give back what the failed call took
                with self.lock:
                    need = size - self.done.total()
                raise self._no_space(self.cache.partial_path(self.asset.sha256), need) from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise

    def _copy_file(self, source: Source) -> None:
        self.attempts += 1
        try:
            fin = open(source.path, "rb")  # noqa: SIM115 - the open error and the copy's errors differ
        except OSError as exc:
            raise DownloadError(
                f"{redact_url(source.url)}: cannot read it ({exc.strerror or exc})", retryable=False
            ) from None
        self.requests += 1  # a read from a source, like an HTTP request
        with fin:
            size = os.fstat(fin.fileno()).st_size
            self._check_size(source, size, retryable=False)
            if self.done.spans:
                self._discard()  # a local copy is cheap; no need to trust older bytes
            self.meta = PartialState(size=size, url=source.url)
            self._begin(size)
            self._preallocate(size)
            transfer = Transfer(self)
            transfer.size = size
            claim = Claim(0, size)
            transfer.active.add(claim)
            self._run_transfer(transfer, claim, fin.readinto, None, None, source=source)

    def _attempt(self, source: Source) -> None:
        """One try at an HTTP source: probe with a ranged GET, then fill the holes over N connections."""
        connections = self.connections
        size = self.meta.size if self.meta.size is not None else self.asset.size
        with self.lock:
            holes = self.done.holes(size) if size is not None else [(self.done.prefix(), None)]
        if not holes:
            self.meta.size = size  # an empty file, or a partial complete before its size was saved
            return  # every byte is on disk already; verifying decides
        start, hole_end = holes[0]
        probe_end = (
            hole_end
            if connections == 1
            else min(hole_end or start + PROBE, start + piece_size(size, connections))
        )
        last = "" if probe_end is None or probe_end == size else str(probe_end - 1)
        headers = {"Range": f"bytes={start}-{last}"}
        if start and self.meta.etag and self.meta.url == source.url and not self.meta.etag.startswith("W/"):
            headers["If-Range"] = self.meta.etag
        transfer = Transfer(self)
        self.net.register(transfer)
        client = HttpClient(self, transfer)
        watchdog = self._watchdog(transfer)
        try:
            self.attempts += 1
            try:
                resp, transfer.url = client.request(source, source.http_url, headers)
            except Aborted:
                raise transfer.error from None  # the watchdog or Ctrl-C cut the connection
            etag = resp.getheader("ETag")
            if resp.status == 416:
                client.close()
                total = parse_content_range(resp.getheader("Content-Range"))[2]
                if total == 0 and start == 0:
                    self._check_size(source, 0)
                    self.meta = PartialState(size=0, url=source.url, etag=etag)
                    return
                raise Changed(
                    f"{redact_url(source.url)} cannot serve bytes from {start} (HTTP 416, size {total}); "
                    "the file changed, starting over"
                )
            if resp.status == 206:
                claim, total = self._probe_range(source, resp, start, probe_end, etag)
                segmented = True
            else:
                total = resp.length  # None when chunked or close-delimited
                if total is not None:
                    self._check_size(source, total)
                else:
                    total = self.asset.size  # then an early EOF reads as truncation, not as the end
                    self.unsized = total is None
                with self.lock:
                    had = self.done.total()
                if had:
                    log.info(
                        "%s: %s answered the resume with the whole file; starting from zero",
                        self.asset.name,
                        redact_url(source.url),
                    )
                    self._discard()
                claim = Claim(0, total)
                segmented = False
            self.meta = PartialState(size=total, url=source.url, etag=etag)
            transfer.etag = etag
            self._begin(total)
            if total is not None:
                self._preallocate(total)
            if segmented:
                transfer.plan(total, claim, connections)
            else:
                transfer.size = total
                transfer.active.add(claim)
            self._run_transfer(
                transfer,
                claim,
                self._reader(client, resp),
                client,
                resp if segmented else None,
                source=source,
            )
        finally:
            if watchdog is not None:
                watchdog.cancel()
            client.close()
            self.net.unregister(transfer)

    def _watchdog(self, transfer: Transfer) -> threading.Timer | None:
        """Cut the transfer when the deadline passes: socket timeouts bound each recv, not a read.

        A server that trickles bytes just faster than the stall timeout keeps
        one buffered read (or one header line) going far past the deadline.
        """
        left = self.remaining()
        if left is None:
            return None
        timer = threading.Timer(max(0.0, left), transfer.fail, args=(self.deadline_error("transferring"),))
        timer.daemon = True
        timer.start()
        return timer

    def _probe_range(
        self, source: Source, resp, start: int, probe_end: int | None, etag: str | None
    ) -> tuple[Claim, int]:
        header = resp.getheader("Content-Range")
        first, last, total = parse_content_range(header)
        expected_last = None if total is None else min(probe_end or total, total) - 1
        if first != start or total is None or last != expected_last:
            asked = f"{start}-{'' if probe_end is None else probe_end - 1}"
            raise DownloadError(
                f"{redact_url(source.url)} answered Range bytes={asked} "
                f"with 206 and Content-Range {header!r}; "
                f"expected bytes {start}-{expected_last}/<size>",
                retryable=True,
            )
        self._check_size(source, total)
        with self.lock:
            if not self.done.spans:
                return Claim(start, last + 1), total  # nothing on disk to protect
        same_url = self.meta.url == source.url
        if self.meta.size is not None and total != self.meta.size:
            raise Changed(
                f"{redact_url(source.url)} now serves {total} bytes, the partial was for "
                f"{self.meta.size}; starting over"
            )
        if same_url and self.meta.etag and etag and etag != self.meta.etag:
            shown = redact_url(source.url)
            raise Changed(f"{shown} changed (ETag {self.meta.etag} -> {etag}); starting over")
        return Claim(start, last + 1), total

    def _reader(self, client: HttpClient, resp: http.client.HTTPResponse) -> Callable[[memoryview], int]:
        def read(view: memoryview) -> int:
            client.set_timeout(self.io_timeout())
            try:
                return resp.readinto(view)
            except TimeoutError:
                raise self.stall_error("reading the body") from None
            except (OSError, http.client.HTTPException) as exc:
                raise DownloadError(f"connection broke: {describe_error(exc)}", retryable=True) from None

        return read

    def _run_transfer(
        self,
        transfer: Transfer,
        claim: Claim,
        read: Callable[[memoryview], int],
        client: HttpClient | None,
        ranged: http.client.HTTPResponse | None,
        *,
        source: Source,
    ) -> None:
        """Stream the first claim here while helpers take other pieces; a keeper hashes and saves progress.

        ``ranged`` is the probe's 206 response when the transfer is segmented, None for a single stream.
        """
        segmented = ranged is not None
        keeper = threading.Thread(target=self._keep, args=(transfer,), name="bake-keeper", daemon=True)
        keeper.start()
        helpers: list[threading.Thread] = []
        if segmented:
            extra = min(self.connections - 1, transfer.pending_pieces())
            helpers = [
                threading.Thread(target=self._helper, args=(transfer, source), name="bake-conn", daemon=True)
                for _ in range(extra)
            ]
            for thread in helpers:
                thread.start()
        try:
            self._stream(transfer, claim, read)
            transfer.release(claim)
            if segmented:
                if not ranged.isclosed():
                    client.close()  # a stolen tail left bytes unread
                self._work(transfer, client, source)
        except BaseException as exc:
            transfer.fail(exc)
        finally:
            for thread in helpers:
                thread.join()
            transfer.finished.set()
            keeper.join()
        if transfer.error is None:
            with self.lock:
                if transfer.size is None:
                    transfer.size = claim.pos
                    self.meta.size = claim.pos
                missing = self.done.holes(transfer.size)
            if missing:
                transfer.error = DownloadError(
                    f"transfer ended with {sum(b - a for a, b in missing)} bytes missing", retryable=True
                )
        self._save_state()
        if transfer.error is not None:
            raise transfer.error

    def _helper(self, transfer: Transfer, source: Source) -> None:
        client = HttpClient(self, transfer)
        try:
            self._work(transfer, client, source)
        except BaseException as exc:
            transfer.fail(exc)
        finally:
            client.close()

    def _work(self, transfer: Transfer, client: HttpClient, source: Source) -> None:
        while (claim := transfer.claim()) is not None:
            if claim is LATER:
                transfer.abort.wait(0.05)
                continue
            try:
                with self.lock:
                    want_end = claim.end
                resp = self._request_piece(transfer, client, source, claim.pos, want_end)
                self._stream(transfer, claim, self._reader(client, resp))
                if not resp.isclosed():
                    client.close()  # a stolen tail left bytes unread
            finally:
                transfer.release(claim)

    def _request_piece(
        self, transfer: Transfer, client: HttpClient, source: Source, start: int, end: int
    ) -> http.client.HTTPResponse:
        try:
            resp, _ = client.request(source, transfer.url, {"Range": f"bytes={start}-{end - 1}"})
        except DownloadError as exc:
            # The probe worked, so a refusal now is more likely an expired redirect than a missing file:
            # let the next attempt start over from the source URL.
            exc.retryable = exc.retryable or not isinstance(exc, _DeadlineExceeded)
            raise
        header = resp.getheader("Content-Range")
        first, last, total = parse_content_range(header)
        if resp.status != 206 or (first, last, total) != (start, end - 1, transfer.size):
            client.close()
            raise DownloadError(
                f"{redact_url(transfer.url)} answered Range bytes={start}-{end - 1} with HTTP {resp.status} "
                f"and Content-Range {header!r}; expected 206 bytes {start}-{end - 1}/{transfer.size}",
                retryable=True,
            )
        etag = resp.getheader("ETag")
        if transfer.etag and etag and etag != transfer.etag:
            client.close()
            with self.lock:
                self.etag_splits.add(self.attempts)
            raise Changed(
                f"{redact_url(source.url)} changed during the download (ETag {transfer.etag} -> {etag}); "
                "starting over"
            )
        return resp

    def _stream(self, transfer: Transfer, claim: Claim, read: Callable[[memoryview], int]) -> None:
        """Copy the body into the partial at the claim's offset until the claim is full (or EOF if open)."""
        buf = memoryview(bytearray(READ_BUF))
        fd = self.fd
        while True:
            if transfer.abort.is_set():
                raise Aborted()
            with self.lock:
                pos, end = claim.pos, claim.end
            if end is not None and pos >= end:
                return
            n = read(buf if end is None else buf[: min(READ_BUF, end - pos)])
            if not n:
                if end is None:
                    return
                raise DownloadError(
                    f"the body ended early at byte {pos}, expected up to {end} (truncated)", retryable=True
                )
            self._pwrite(fd, buf[:n], pos)
            with self.lock:
                claim.pos = pos + n
                self.done.add(pos, pos + n)
                self.bytes += n
            self.progress.advance(self.asset, n)

    def _pwrite(self, fd: int, data: memoryview, offset: int) -> None:
        try:
            while data:
                written = os.pwrite(fd, data, offset)
                data, offset = data[written:], offset + written
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                with self.lock:
                    need = (self.meta.size or offset) - self.done.total()
                raise self._no_space(self.cache.partial_path(self.asset.sha256), need) from None
            raise

    def _keep(self, transfer: Transfer) -> None:
        """Hash the completed prefix and save progress every _SAVE_EVERY seconds until the transfer ends."""
        try:
            while not transfer.finished.wait(_SAVE_EVERY):
                with self.lock:
                    prefix = self.done.prefix()
                self.hasher.catch_up(self.fd, prefix, _HASH_SLICE)
                self._save_state()
        except BaseException as exc:
            transfer.fail(exc)

    def _verify(self, source: Source) -> None:
        size = self.meta.size
        if os.fstat(self.fd).st_size > size:
            os.ftruncate(self.fd, size)
        self.hasher.catch_up(self.fd, size)
        digest = self.hasher.sha.hexdigest()
        if digest != self.asset.sha256 and not self.options.unknown_sha256:
            raise ChecksumMismatch(self.asset.sha256, digest, redact_url(source.url), asset=self.asset.name)
        os.close(self.fd)
        self.fd = None
        self.cache.commit(self.asset.sha256)


def _clear_stale_staging(target: Path) -> None:
    """Remove staging files for ``target`` left by a process of this host that no longer exists (SIGKILL)."""
    prefix = f".{target.name}{_STAGING_MARK}"
    host = socket.gethostname()
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(target.parent):
            if not entry.name.startswith(prefix):
                continue
            owner, _, pid = entry.name[len(prefix) :].rpartition(".")[0].rpartition(".")
            if owner == host and pid.isdigit() and not _pid_alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

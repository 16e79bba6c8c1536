"""Verified downloads: mirrors, retries, resume, segmented transfers and a shared content-addressed cache.

The flow for one asset: an existing verified file at the destination or in the
cache costs no network. Otherwise, under the cache's lock for its sha256, each
candidate URL is tried in turn. A source gets retries with backoff; a transfer
resumes from the partial kept in the cache; the SHA-256 follows the bytes as
they land. A verified partial becomes a cache object, which reaches the
destination through a staging file next to the target and an atomic rename.

The package reads top-down; each module imports only those below it:

- ``options``, ``failures``: what a fetch is asked and reports; the exceptions that steer it.
- ``segments``: byte ranges, claims and the piece queue (no I/O).
- ``clock``, ``retry``: the deadline, stall timeout and cancel; the retry policy.
- ``sources``, ``transport``, ``session``: URLs made concrete; HTTP(S); what a run shares.
- ``partial``, ``transfer``, ``attempt``: the cache's partial file; the segmented transfer; one HTTP try.
- ``local``, ``hub_download`` (with ``hub_download_client``): one try at a ``file://`` source; one
  try at a Hub file through huggingface_hub's downloader and its guarded HTTP client, for a ``[[hub]]``
  entry that asks for it (loaded only then).
- ``install``, ``progress``: staging and rename into the destination; progress sinks.
- ``job``: one asset, orchestrating the above; this module runs the jobs of a run.

A file of unknown size is bounded by ``--max-size`` and ``--min-free``; every object enters
the cache through ``Cache.commit`` once its bytes were hashed.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from bake.asset import Asset
from bake.cache import Cache
from bake.errors import FetchError, NoSpaceError, UsageError
from bake.fetch import install
from bake.fetch.clock import default_deadline, process_started
from bake.fetch.job import AssetJob
from bake.fetch.options import DEFAULT_CONNECTIONS, FetchFailed, FetchOptions, FetchRecord
from bake.fetch.progress import Progress
from bake.fetch.retry import BACKOFF_BASE, BACKOFF_CAP, RetryPolicy
from bake.fetch.session import Session
from bake.fetch.sources import candidate_urls, parse_mirrors

__all__ = [
    "DEFAULT_CONNECTIONS",
    "FetchFailed",
    "FetchOptions",
    "FetchRecord",
    "NoSpaceError",
    "candidate_urls",
    "default_deadline",
    "fetch_assets",
    "fetch_to_cache",
    "parse_mirrors",
    "process_started",
]


def fetch_assets(
    assets: Sequence[Asset], dest: Path, options: FetchOptions, progress: Progress | None = None
) -> list[FetchRecord]:
    """Fetch, verify and install every asset under ``dest``, ``options.jobs`` at a time.

    Returns one FetchRecord per asset, in input order. Every asset that can be
    fetched is installed even when others fail; then FetchFailed is raised,
    naming each failed asset with every source tried, and the directories the
    run made under ``dest`` that stayed empty are taken back. UsageError/ManifestError
    come before any network traffic; NoSpaceError failures are among
    FetchFailed's. Ctrl-C stops all transfers, keeps their partials, and
    re-raises KeyboardInterrupt.
    """
    return _fetch(assets, Path(dest), options, progress)


def fetch_to_cache(
    assets: Sequence[Asset], options: FetchOptions, progress: Progress | None = None
) -> list[FetchRecord]:
    """Fetch and verify ``assets`` into the cache only; return their records (``bake add``).

    With ``options.unknown_sha256``, each asset's sha256 is only the key of its partial:
    the object is committed under the digest of what arrived, which its record gives.
    Raises as ``fetch_assets``.
    """
    return _fetch(assets, None, options, progress)


def _fetch(
    assets: Sequence[Asset], dest: Path | None, options: FetchOptions, progress: Progress | None
) -> list[FetchRecord]:
    if options.connections < 1 or options.attempts < 1 or options.jobs < 1:
        raise UsageError("connections, attempts and jobs must each be at least 1")
    if options.timeout <= 0 or (options.deadline is not None and options.deadline <= 0):
        raise UsageError("timeout and deadline must be positive numbers of seconds")
    plans = [(asset, candidate_urls(asset, options)) for asset in assets]
    session = Session(options)
    if any(urlsplit(u).scheme.lower() in ("https", "hf") for _, urls in plans for u in urls):
        session.ssl_context()  # a bad CA bundle is a usage error, reported before anything is made
    cache = Cache(options.cache_dir)
    cache.ensure()
    dirs = None
    if dest is not None:
        dirs = install.DestDirs(dest)
        install.make_dest(dirs)
    # The backoff is read from this module at call time, so a test can shorten it here.
    retry = RetryPolicy(options.attempts, backoff_base=BACKOFF_BASE, backoff_cap=BACKOFF_CAP)
    sink = progress or Progress()
    try:
        jobs = [AssetJob(asset, urls, dirs, cache, session, sink, retry) for asset, urls in plans]
        for job in jobs[: options.jobs]:  # these begin with the run; the others when a worker frees up
            job.since = options.started
        return _run_all(jobs, session, options.jobs)
    except BaseException:
        if dirs is not None:
            dirs.take_back()  # a failed run leaves --dest as it found it
        raise


def _run_all(jobs: list[AssetJob], session: Session, workers: int) -> list[FetchRecord]:
    """Run the jobs on ``workers`` threads; Ctrl-C cancels every transfer before it propagates."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bake-fetch")
    futures = [pool.submit(job.run) for job in jobs]
    try:
        concurrent.futures.wait(futures)
    except BaseException:
        session.cancel_all()
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

"""Bytes from the Hub: bake's own engine by default, or huggingface_hub's downloader, verified either way.

A ``[[hub]]`` blob is an ordinary asset with ``hf://`` URLs, so by default bake's
engine fetches it (mirrors, resume, segments over the CDN redirect, the shared
cache; the token goes to HF_ENDPOINT's origin only). An entry with
``downloader = "huggingface_hub"`` is fetched by ``hf_hub_download`` (hf_xet where
installed and the Hub offers it) into a throw-away cache beside bake's cache; the
file is checked against the manifest's sha256 and becomes a verified cache object,
which the engine then installs like any other. Either way nothing unverified
reaches ``--dest``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bake import fetch
from bake.cache import Cache
from bake.errors import ChecksumMismatch, FetchError, UsageError
from bake.fetch import sources
from bake.hashes import sha256_file
from bake.manifest import Asset

log = logging.getLogger(__name__)
# huggingface_hub's HTTP client logs every request at INFO, which would drown bake's own lines.
logging.getLogger("httpx2").setLevel(logging.WARNING)


def endpoint() -> str | None:
    """HF_ENDPOINT without its trailing slash, or None for huggingface_hub's default."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or None


def hub_error(what: str, exc: Exception) -> FetchError:
    """Turn a huggingface_hub exception into exit 3, naming the file and the fix, never the token."""
    from huggingface_hub import errors

    if isinstance(exc, errors.EntryNotFoundError):
        return FetchError(f"{what}: the Hub has no such file at that commit (404); the repository changed")
    if isinstance(exc, errors.RevisionNotFoundError):
        return FetchError(f"{what}: the Hub does not know that commit; was it force-pushed away?")
    if isinstance(exc, (errors.GatedRepoError, errors.RepositoryNotFoundError)):
        return FetchError(
            f"{what}: the Hub refused the repository (not found, private or gated); "
            "set HF_TOKEN or HF_TOKEN_FILE to a token that may read it"
        )
    return FetchError(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def download_file(
    repo: str, kind: str, commit: str, path: str, cache_dir: Path, token: str | None, *, name: str = ""
) -> Path:
    """Download one file with ``hf_hub_download`` into ``cache_dir``; return the real file's path.

    Raises FetchError, naming the file (and the asset ``name`` when given), for anything
    the Hub or the network answers instead of the file.
    """
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise UsageError(
            "the huggingface_hub downloader needs huggingface_hub; pip install huggingface_hub"
        ) from None
    what = f"hf://{'datasets/' if kind == 'dataset' else ''}{repo}@{commit}/{path}"
    what = f"asset {name!r} ({what})" if name else what
    try:
        local = hf_hub_download(
            repo,
            path,
            repo_type=kind,
            revision=commit,
            cache_dir=str(cache_dir),
            token=token,
            endpoint=endpoint(),
        )
    except Exception as exc:  # huggingface_hub raises many types; each becomes one exit-3 line
        if isinstance(exc, (KeyboardInterrupt, UsageError)):
            raise
        raise hub_error(what, exc) from None
    return Path(os.path.realpath(local))


def _lock_wait(asset: Asset, deadline: float | None):
    """A ``Cache.lock`` wait that gives up at the asset's deadline (the contract's default when unset)."""
    limit = time.monotonic() + (deadline or max(30 * 60, (asset.size or 0) / (512 * 1024)))

    def wait(seconds: float) -> None:
        if time.monotonic() + seconds > limit:
            raise FetchError(
                f"asset {asset.name!r}: another bake process held its cache lock past the deadline; "
                "let it finish, or rerun with --deadline"
            )
        time.sleep(seconds)

    return wait


def _via_hub(asset: Asset, cache: Cache, token: str | None, deadline: float | None) -> float:
    """Download ``asset`` with huggingface_hub, verify it, commit it to bake's cache; return seconds."""
    t0 = time.monotonic()
    if cache.object_path(asset.sha256).exists():
        return 0.0
    tmp = Path(tempfile.mkdtemp(prefix="hub-", dir=cache.root))
    try:
        entry, path = asset.hub.uses[0]
        local = download_file(entry.repo, entry.kind, entry.commit, path, tmp, token, name=asset.name)
        actual = sha256_file(local)
        if actual != asset.sha256:
            raise ChecksumMismatch(asset.sha256, actual, entry.url(path), asset=asset.name)
        with cache.lock(asset.sha256, wait=_lock_wait(asset, deadline)):
            os.replace(local, cache.object_path(asset.sha256))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return time.monotonic() - t0


def _prefetch(
    assets: list[Asset], options: fetch.FetchOptions
) -> tuple[dict[str, float], dict[str, FetchError]]:
    """Bring the huggingface_hub-downloaded assets into bake's cache, ``options.jobs`` at a time."""
    if options.no_origin and endpoint() is None:
        raise UsageError(
            "--no-origin: the huggingface_hub downloader reaches only HF_ENDPOINT; set HF_ENDPOINT "
            'to your Hub mirror, or use downloader = "bake" with a --mirror'
        )
    cache = Cache(options.cache_dir)
    cache.ensure()
    token = sources.hf_token()
    seconds: dict[str, float] = {}
    failures: dict[str, FetchError] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = {a.name: pool.submit(_via_hub, a, cache, token, options.deadline) for a in assets}
        for name, future in futures.items():
            exc = future.exception()
            if exc is None:
                seconds[name] = future.result()
            elif isinstance(exc, FetchError):
                failures[name] = exc
            else:
                raise exc
    return seconds, failures


def uses_hub_downloader(asset: Asset) -> bool:
    return asset.hub is not None and asset.hub.uses[0][0].downloader == "huggingface_hub"


def fetch_assets(
    assets: Sequence[Asset], dest: Path, options: fetch.FetchOptions, progress: fetch.Progress | None = None
) -> list[fetch.FetchRecord]:
    """``fetch.fetch_assets``, with the blobs of ``downloader = "huggingface_hub"`` entries downloaded first.

    Returns one record per asset; raises FetchFailed naming every asset that failed,
    after installing every other one.
    """
    theirs = [a for a in assets if uses_hub_downloader(a)]
    seconds, failures = _prefetch(theirs, options) if theirs else ({}, {})
    remaining = [a for a in assets if a.name not in failures]
    records: list[fetch.FetchRecord] = []
    try:
        records = fetch.fetch_assets(remaining, dest, options, progress)
    except fetch.FetchFailed as exc:
        failures.update(exc.failures)
        records = exc.records
    by_name = {a.name: a for a in theirs}
    records = [
        dataclasses.replace(
            r, source=by_name[r.name].urls[0], bytes=r.size, seconds=seconds[r.name], cached=False
        )
        if r.name in seconds and seconds[r.name] > 0
        else r
        for r in records
    ]
    if failures:
        raise fetch.FetchFailed(failures, records)
    return records

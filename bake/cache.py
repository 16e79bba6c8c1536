"""Content-addressed download cache: verified objects, resumable partials and per-sha256 locks."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bake import atomic
from bake.byte_sizes import MIB
from bake.errors import FetchError
from bake.hashes import SHA256_HEX

log = logging.getLogger(__name__)

STATE_VERSION = 1


def default_cache_dir() -> Path:
    """Return ``${XDG_CACHE_HOME:-~/.cache}/bake`` as an absolute path."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).absolute() / "bake"


@dataclass
class PartialState:
    """What is known about a partial download: the file's size and identity, and the byte ranges on disk.

    ``url`` is kept with any password redacted: the cache outlives the fetch (a BuildKit cache mount).
    """

    size: int | None = None
    url: str | None = None
    etag: str | None = None
    modified: str | None = None  # Last-Modified: the validator of a server that sends no ETag
    done: list[tuple[int, int]] = field(default_factory=list)  # byte ranges written ("done" in the file)


class Cache:
    """A cache laid out as ``objects/<sha256>``, ``partial/<key>[.json]`` and ``locks/<key>.lock``.

    Files enter ``objects/`` one way, ``commit``: a partial whose every byte was hashed is
    renamed to the digest it hashes to. ``bake fetch`` commits only bytes that match the
    manifest's sha256; ``bake add``, which is learning a file's sha256, commits what
    arrived under its digest. Objects are hashed again whenever they are used. Partials
    are resumable and keyed by sha256 (by the URL's sha256 while ``bake add`` does not
    know the file's), so any source of the same content can continue them; a
    ``partial/<key>.staging`` directory is where huggingface_hub's downloader writes,
    under the key's lock, before bake hashes what it wrote.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def ensure(self) -> None:
        """Create the cache layout. Raises FetchError if the directory cannot be written."""
        advice = "point --cache-dir (or XDG_CACHE_HOME) at a filesystem with room"
        try:
            with atomic.no_space_as_error(f"cache directory {self.root}", self.root / "locks", 0, advice):
                for sub in ("objects", "partial", "locks"):
                    (self.root / sub).mkdir(parents=True, exist_ok=True)
            if not os.access(self.root, os.W_OK):
                raise PermissionError(13, "not writable")
        except OSError as exc:
            raise FetchError(
                f"cache directory {self.root}: cannot use it ({exc.strerror or exc}); "
                "point --cache-dir (or XDG_CACHE_HOME) at a writable directory"
            ) from None

    def object_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256

    def partial_path(self, sha256: str) -> Path:
        return self.root / "partial" / sha256

    def state_path(self, sha256: str) -> Path:
        return self.root / "partial" / f"{sha256}.json"

    def lock_path(self, sha256: str) -> Path:
        return self.root / "locks" / f"{sha256}.lock"

    def staging_dir(self, sha256: str) -> Path:
        """Where another downloader (huggingface_hub) writes, under the key's lock, before bake hashes it."""
        return self.root / "partial" / f"{sha256}.staging"

    @contextlib.contextmanager
    def lock(
        self, sha256: str, *, shared: bool = False, wait: Callable[[float], None] | None = None
    ) -> Iterator[None]:
        """Hold the flock for ``sha256`` (shared or exclusive) for the duration of the block.

        ``wait(seconds)`` is called between polls while another process holds the
        lock; it may raise to give up (deadline, cancel). Without it, a busy lock
        raises BlockingIOError at once.
        """
        fd = _acquire(self.lock_path(sha256), fcntl.LOCK_SH if shared else fcntl.LOCK_EX, wait)
        try:
            yield
        finally:
            os.close(fd)

    def load_state(self, sha256: str) -> PartialState | None:
        """Return the saved progress of a partial, or None when there is none or it is unreadable."""
        try:
            raw = json.loads(self.state_path(sha256).read_text(encoding="utf-8"))
            if raw.get("version") != STATE_VERSION:
                return None
            done = [(int(s), int(e)) for s, e in raw["done"]]
            size = raw["size"]
            if size is not None and (not isinstance(size, int) or size < 0):
                return None
            if any(s < 0 or e <= s or (size is not None and e > size) for s, e in done):
                return None
            return PartialState(
                size=size, url=raw.get("url"), etag=raw.get("etag"), modified=raw.get("modified"), done=done
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save_state(self, sha256: str, state: PartialState) -> None:
        """Write the progress file atomically; a reader sees the old or the new one, never a torn one.

        No fsync: the file only has to survive a killed process, whose page cache
        the kernel keeps. After a power loss the final hash catches any lie.
        """
        doc = {
            "version": STATE_VERSION,
            "size": state.size,
            "url": state.url,
            "etag": state.etag,
            "modified": state.modified,
            "done": [list(r) for r in state.done],
        }
        atomic.write_file(self.state_path(sha256), json.dumps(doc).encode(), durable=False)

    def discard_partial(self, sha256: str) -> None:
        """Remove a partial and its progress file."""
        for path in (self.state_path(sha256), self.partial_path(sha256)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def commit(self, key: str, digest: str | None = None) -> Path:
        """Move the partial ``key`` to ``objects/<digest>`` and drop its progress file; return the object.

        The one way into ``objects/``: the caller has hashed every byte, and ``digest`` is
        what they hash to (``key`` itself by default, a fetch whose sha256 matched).
        """
        obj = self.object_path(digest or key)
        os.replace(self.partial_path(key), obj)
        with contextlib.suppress(FileNotFoundError):
            self.state_path(key).unlink()
        return obj


def try_flock(fd: int, mode: int) -> bool:
    """Take the flock ``mode`` (LOCK_SH or LOCK_EX) on ``fd`` without waiting: True when taken, False
    while another open file description holds it. Raises OSError when the lock call itself fails
    (ENOLCK, EOPNOTSUPP: a filesystem without working locks, NFS without lockd)."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _acquire(path: Path, mode: int, wait: Callable[[float], None] | None) -> int:
    """Open and flock ``path``; retry when prune unlinked the file between our open and our lock."""
    delay = 0.01
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while not try_flock(fd, mode):
                if wait is None:
                    raise BlockingIOError(errno.EWOULDBLOCK, "the lock is held")
                wait(delay)
                delay = min(delay * 2, 0.25)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)


@dataclass(frozen=True)
class PruneResult:
    """What ``prune`` removed, what it freed, and what it left because another process was using it."""

    removed: tuple[Path, ...]
    bytes_freed: int
    objects_kept: int
    busy: tuple[str, ...]
    dry_run: bool = False  # nothing was removed: ``removed`` and ``bytes_freed`` say what would be

    def __str__(self) -> str:
        busy = f", {len(self.busy)} in use and left alone" if self.busy else ""
        did = ("would remove", "would free") if self.dry_run else ("removed", "freed")
        return (
            f"cache prune {did[0]} {len(self.removed)} file(s), {did[1]} {self.bytes_freed / MIB:.1f} MiB, "
            f"kept {self.objects_kept} verified object(s){busy}"
        )


def prune(
    cache_dir: Path, keep: set[str] | None, max_age_days: float, *, dry_run: bool = False
) -> PruneResult:
    """Reclaim every partial no running fetch holds that could not be resumed; drop objects not in ``keep``.

    A partial (and any staging directory of its sha256) goes when it is older than
    ``max_age_days``, when its progress record is missing or unusable, or when the record
    knows no size: a download bounded by nothing, such as a source that never ended. A
    younger partial of known size keeps its bytes, but gives back any disk it holds past
    them (an earlier bake preallocated what a server claimed). ``keep=None`` keeps every
    finished object. Entries locked by a running fetch are skipped. Freed bytes are disk
    blocks given back. With ``dry_run`` nothing is removed or trimmed: the result says what would be.
    Returns a PruneResult.
    """
    cache = Cache(cache_dir)
    tally = _PruneTally(dry_run)
    cutoff = time.time() - max_age_days * 86400
    shas = set()
    for sub in ("objects", "partial"):
        with contextlib.suppress(FileNotFoundError):
            shas.update(p.name.split(".")[0] for p in (cache.root / sub).iterdir())
    for sha in sorted(s for s in shas if SHA256_HEX.fullmatch(s)):
        try:
            # No lock file: no fetch holds it (and a dry run makes none).
            missing = dry_run and not cache.lock_path(sha).exists()
            fd = None if missing else _acquire(cache.lock_path(sha), fcntl.LOCK_EX, None)
        except BlockingIOError:
            tally.busy.append(sha)
            continue
        except FileNotFoundError:  # no locks/ directory: nothing can be using it
            fd = None
        try:
            _prune_entry(cache, sha, keep, cutoff, tally, locked=fd is not None)
        finally:
            if fd is not None:
                os.close(fd)
    # Progress-file staging files left by a killed fetch.
    with contextlib.suppress(FileNotFoundError):
        for stray in (cache.root / "partial").glob(f".*{atomic.STAGING_MARK}*"):
            if stray.stat().st_mtime < cutoff:
                tally.drop(stray)
    log.debug("pruned %s%s", tally.removed, " (dry run)" if dry_run else "")
    return PruneResult(tuple(tally.removed), tally.freed, tally.kept, tuple(tally.busy), dry_run)


@dataclass
class _PruneTally:
    """What a prune removed (or, dry, would remove), freed, kept and found busy."""

    dry_run: bool
    removed: list[Path] = field(default_factory=list)
    freed: int = 0
    kept: int = 0
    busy: list[str] = field(default_factory=list)

    def drop(self, path: Path) -> None:
        self.freed += _held(path) if self.dry_run else _remove(path)
        self.removed.append(path)


def _prune_entry(
    cache: Cache, sha: str, keep: set[str] | None, cutoff: float, tally: _PruneTally, *, locked: bool
) -> None:
    """Prune one sha256's object and partials (the caller holds its lock, or none exists)."""
    obj = cache.object_path(sha)
    doomed = _doomed_partials(cache, sha, cutoff)
    if obj.exists():
        if keep is None or sha in keep:
            tally.kept += 1
        else:
            doomed.append(obj)
    if not doomed and cache.partial_path(sha).exists():
        tally.freed += _trim_partial(cache, sha, dry_run=tally.dry_run)
    for path in doomed:
        tally.drop(path)
    if locked and not tally.dry_run and not obj.exists() and not cache.partial_path(sha).exists():
        cache.lock_path(sha).unlink()  # safe: we hold it, and _acquire re-checks the inode


def _doomed_partials(cache: Cache, sha256: str, cutoff: float) -> list[Path]:
    """The partial files of ``sha256`` that prune removes (the caller holds its lock): see ``prune``."""
    staging = cache.staging_dir(sha256)
    doomed = [staging] if staging.exists() else []  # nobody holds the lock, so nobody fills it
    parts = [p for p in (cache.partial_path(sha256), cache.state_path(sha256)) if p.exists()]
    if not parts:
        return doomed
    state = cache.load_state(sha256)
    if state is None or state.size is None or max(p.stat().st_mtime for p in parts) < cutoff:
        doomed += parts
    return doomed


def _held(path: Path) -> int:
    """The disk a file, or a directory tree's files, hold."""
    if path.is_dir() and not path.is_symlink():
        return sum(_disk_used(p) for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return _disk_used(path)


def _remove(path: Path) -> int:
    """Remove a file or a directory tree; return the disk it held."""
    held = _held(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return held


def _disk_used(path: Path) -> int:
    """The disk a file holds: its blocks, not its length (a partial may be sparse, or preallocated)."""
    return path.stat().st_blocks * 512


def _trim_partial(cache: Cache, sha256: str, *, dry_run: bool = False) -> int:
    """Give back the disk a kept partial holds past its last recorded byte; returns the bytes freed
    (with ``dry_run``, what would be: the blocks past the one that holds that byte).

    The caller holds the partial's lock, and knows its progress record is usable.
    """
    path = cache.partial_path(sha256)
    state = cache.load_state(sha256)
    end = max((e for _, e in state.done), default=0) if state is not None else 0
    try:
        before = _disk_used(path)
        st = path.stat()
        if dry_run:  # the blocks past the one that holds the last byte: what truncating gives back
            kept = -(-end // st.st_blksize) * st.st_blksize
            return max(0, before - kept) if st.st_size > end else 0
        if path.stat().st_size > end:
            os.truncate(path, end)
        return max(0, before - _disk_used(path))
    except FileNotFoundError:
        return 0

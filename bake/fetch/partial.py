"""The partial file of one asset in the cache: its fd, the ranges written, the saved state, the hashed prefix.

A partial is keyed by sha256, so any source of the same bytes can resume it.
Its progress record (``PartialState``) is saved a few times a second, so a
killed process loses a fraction of a second of transfer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bake import atomic
from bake.byte_sizes import MIB, shown_size
from bake.cache import Cache, PartialState
from bake.errors import ChecksumMismatch
from bake.fetch.failures import NO_SPACE_ADVICE, Changed, DiskBound
from bake.fetch.options import DEFAULT_MIN_FREE, MIN_FREE_SHARE
from bake.fetch.segments import Claim, Ranges

log = logging.getLogger(__name__)

HASH_BLOCK = 4 * MIB
HASH_SLICE = 64 * MIB  # hashing per checkpoint, so progress keeps being saved


class PrefixHasher:
    """SHA-256 of the file's contiguous completed prefix, read back from the page cache as it grows."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.pos = 0

    def catch_up(self, fd: int, upto: int, limit: int | None = None) -> None:
        stop = upto if limit is None else min(upto, self.pos + limit)
        while self.pos < stop:
            block = os.pread(fd, min(HASH_BLOCK, stop - self.pos), self.pos)
            if not block:
                raise Changed("the partial file is shorter than its progress record; starting it over")
            self.sha.update(block)
            self.pos += len(block)


@dataclass(frozen=True)
class DiskBounds:
    """How far a download whose size the manifest does not give may go: a cap, and free space to leave."""

    max_size: int
    min_free: int | None  # None: the smaller of DEFAULT_MIN_FREE and MIN_FREE_SHARE of the filesystem
    entry: bool = True  # the file has a manifest entry to give its size (False: bake add, which makes it)

    def unsized(self, name: str) -> str:
        """Why a bound applies to asset ``name``, for its message."""
        return (
            f"asset {name!r} has no size in the manifest"
            if self.entry
            else f"the size of {name!r} is unknown"
        )

    def or_give_size(self) -> str:
        return ", or give the asset its size in the manifest" if self.entry else ""

    def reserve(self, where: Path) -> int:
        """The bytes to leave free on the filesystem of ``where``."""
        if self.min_free is not None:
            return self.min_free
        return min(DEFAULT_MIN_FREE, int(atomic.filesystem_bytes(where) * MIN_FREE_SHARE))


class PartialFile:
    """The cache's partial for one sha256, open for writing at any offset by several connections.

    With ``bounds`` (an asset of unknown size), every write is checked against them, and a
    failed partial that no validator identifies is removed, since nothing could resume it safely.
    """

    def __init__(self, cache: Cache, sha256: str, asset_name: str, bounds: DiskBounds | None = None) -> None:
        self.cache = cache
        self.sha256 = sha256
        self.asset_name = asset_name
        self.bounds = bounds
        self.path = cache.partial_path(sha256)
        # The lock guards ``written``, ``received`` and ``state.size``, and (shared with the
        # transfer's claim queue) the ``pos`` and ``end`` of every claim being filled.
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.written = Ranges()  # byte ranges of the partial that hold downloaded bytes
        self.state = PartialState()  # the source identity and size the written bytes belong to
        self.hasher = PrefixHasher()
        self.received = 0  # bytes written this run
        self.from_zero = True  # every byte in the partial came from the current attempt series' clean start

    def open(self) -> None:
        """Open (or create) the partial and load its saved progress; a record that lies starts it empty."""
        state = self.cache.load_state(self.sha256)
        atomic.clear_stale_staging(self.cache.state_path(self.sha256))
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        have = os.fstat(self.fd).st_size
        if state is None or any(end > have for _, end in state.done):
            os.ftruncate(self.fd, 0)
            state = PartialState()
        self.state = state
        self.written = Ranges(state.done)
        self.hasher = PrefixHasher()
        if state.done:
            log.info(
                "%s: resuming; %.1f MiB already in the cache", self.asset_name, self.written.total() / MIB
            )

    def close(self) -> None:
        """Close the partial. It is removed when nothing could resume it: no bytes, or unknown size and
        no validator (no ETag, no Last-Modified) to tell whether a rerun would get the same file."""
        if self.fd is None:
            return
        os.close(self.fd)
        self.fd = None
        unsafe = self.bounds is not None and not (self.state.etag or self.state.modified)
        if self.written.spans and unsafe:
            log.info("%s: the partial has no size and no validator to resume it by; removed", self.asset_name)
        if not self.written.spans or unsafe:
            self.cache.discard_partial(self.sha256)

    def written_total(self) -> int:
        with self.lock:
            return self.written.total()

    def discard(self) -> None:
        """Throw away every byte and the saved state: the next attempt starts from zero."""
        self.from_zero = True
        os.ftruncate(self.fd, 0)
        with self.lock:
            self.written = Ranges()
        self.state = PartialState()
        self.hasher = PrefixHasher()
        with contextlib.suppress(FileNotFoundError):
            self.cache.state_path(self.sha256).unlink()

    def save(self) -> None:
        """Save the progress record (size, source identity, ranges written)."""
        with self.lock:
            state = dataclasses.replace(self.state, done=list(self.written.spans))
        with self._no_space(self.cache.state_path(self.sha256), 4096):
            self.cache.save_state(self.sha256, state)

    def checkpoint(self) -> None:
        """Hash a slice more of the completed prefix, then save progress; called a few times a second."""
        with self.lock:
            prefix = self.written.prefix()
        self.hasher.catch_up(self.fd, prefix, HASH_SLICE)
        self.save()

    def ensure_room(self, size: int | None) -> None:
        """Check that the rest of a ``size``-byte file fits on the disk, so a full disk shows now.

        Only a size the manifest vouches for is checked, and nothing is reserved:
        the partial takes disk as bytes arrive, so a failed or abandoned one
        holds about what it received, whatever a server claimed.
        """
        if not size:
            return
        need = size - self.written_total()
        if atomic.free_bytes(self.path) < need:
            raise atomic.no_space_error(f"asset {self.asset_name!r}", self.path, need, NO_SPACE_ADVICE)

    def check_claim(self, total: int, source: str) -> None:
        """Refuse, before any byte, a source announcing more than --max-size for a file of unknown size."""
        if self.bounds is not None and total > self.bounds.max_size:
            raise self._over_cap(f"{source} announces {total} bytes, more than")

    def _over_cap(self, what: str) -> DiskBound:
        cap = self.bounds.max_size
        return DiskBound(
            f"{self.bounds.unsized(self.asset_name)}, and {what} the --max-size cap of {shown_size(cap)} "
            f"({cap} bytes); raise --max-size if the file really is that large (a source that never ends "
            f"stops here){self.bounds.or_give_size()}",
            disk=False,
        )

    def _check_bounds(self, end: int, n: int, source: str) -> None:
        """Raise DiskBound when writing ``n`` bytes up to ``end`` would pass the cap or eat the reserve."""
        if end > self.bounds.max_size:
            raise self._over_cap(f"{source} sent more than")
        free = atomic.free_bytes(self.path)
        reserve = self.bounds.reserve(self.path)
        if free - n < reserve:
            raise DiskBound(
                f"{self.bounds.unsized(self.asset_name)}; stopped after {end - n} bytes, before the free "
                f"space on the device of {self.path.parent} ({free} bytes) fell below the --min-free "
                f"reserve of {shown_size(reserve)}; free some space or point --cache-dir at a larger "
                f"filesystem, or lower --min-free{self.bounds.or_give_size()}",
                disk=True,
            )

    def write(self, claim: Claim, data: memoryview, pos: int) -> None:
        """Write ``data`` at ``pos`` and advance ``claim`` past it. Raises DiskBound past the bounds."""
        offset = pos
        if self.bounds is not None:
            self._check_bounds(pos + len(data), len(data), self.state.url or "its source")
        with self._no_space(self.path, lambda: (self.state.size or offset) - self.written_total()):
            while data:
                written = os.pwrite(self.fd, data, offset)
                data, offset = data[written:], offset + written
        with self.lock:
            claim.pos = offset
            self.written.add(pos, offset)
            self.received += offset - pos

    def verify(self, expected: str | None, source: str) -> str:
        """Hash the rest of the file; commit it to the cache's objects under its digest, and return that.

        Raises ChecksumMismatch naming ``source`` when the digest is not ``expected``;
        ``expected`` None (bake add learning a hash) accepts any digest.
        """
        size = self.state.size
        if os.fstat(self.fd).st_size > size:
            os.ftruncate(self.fd, size)
        self.hasher.catch_up(self.fd, size)
        digest = self.hasher.sha.hexdigest()
        if expected is not None and digest != expected:
            raise ChecksumMismatch(expected, digest, source, asset=self.asset_name)
        os.close(self.fd)
        self.fd = None
        self.cache.commit(self.sha256, digest)
        return digest

    def keep(self, digest: str) -> None:
        """Commit the whole, hashed partial under ``digest``, the sha256 its bytes have (not the one
        asked for), and start an empty partial. A manifest whose sha256 was out of date then needs
        no second download once corrected: the object is named by what its bytes are."""
        os.close(self.fd)
        self.fd = None
        self.cache.commit(self.sha256, digest)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.discard()

    def adopt(self, path: Path, source: str) -> None:
        """Make a complete file another downloader wrote (in this partial's staging directory) the partial.

        A rename within the cache; then ``verify`` hashes it like any download.
        """
        os.replace(path, self.path)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDWR)
        size = os.fstat(self.fd).st_size
        with self.lock:
            self.written = Ranges([(0, size)])
            self.received += size
        self.state = PartialState(size=size, url=source)
        self.hasher = PrefixHasher()

    def _no_space(self, where: Path, need: int | Callable[[], int]) -> contextlib.AbstractContextManager:
        return atomic.no_space_as_error(f"asset {self.asset_name!r}", where, need, NO_SPACE_ADVICE)

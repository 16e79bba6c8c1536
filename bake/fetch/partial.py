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
from pathlib import Path

from bake import atomic
from bake.cache import Cache, PartialState
from bake.errors import ChecksumMismatch
from bake.fetch.failures import NO_SPACE_ADVICE, Changed
from bake.fetch.segments import Claim, Ranges
from bake.units import MIB

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


class PartialFile:
    """The cache's partial for one sha256, open for writing at any offset by several connections."""

    def __init__(self, cache: Cache, sha256: str, asset_name: str) -> None:
        self.cache = cache
        self.sha256 = sha256
        self.asset_name = asset_name
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
        """Close the partial; one with nothing written is removed, since there is nothing to resume."""
        if self.fd is None:
            return
        os.close(self.fd)
        self.fd = None
        if not self.written.spans:
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

    def write(self, claim: Claim, data: memoryview, pos: int) -> None:
        """Write ``data`` at ``pos`` and advance ``claim`` past it."""
        offset = pos
        with self._no_space(self.path, lambda: (self.state.size or offset) - self.written_total()):
            while data:
                written = os.pwrite(self.fd, data, offset)
                data, offset = data[written:], offset + written
        with self.lock:
            claim.pos = offset
            self.written.add(pos, offset)
            self.received += offset - pos

    def verify(self, sha256: str, source: str, *, any_digest: bool = False) -> None:
        """Hash the rest of the file; move it into the cache's objects when it matches ``sha256``.

        Raises ChecksumMismatch naming ``source`` when it does not, unless
        ``any_digest`` (``sha256`` is then only the cache key).
        """
        size = self.state.size
        if os.fstat(self.fd).st_size > size:
            os.ftruncate(self.fd, size)
        self.hasher.catch_up(self.fd, size)
        digest = self.hasher.sha.hexdigest()
        if digest != sha256 and not any_digest:
            raise ChecksumMismatch(sha256, digest, source, asset=self.asset_name)
        os.close(self.fd)
        self.fd = None
        self.cache.commit(sha256)

    def _no_space(self, where: Path, need: int | Callable[[], int]) -> contextlib.AbstractContextManager:
        return atomic.no_space_as_error(f"asset {self.asset_name!r}", where, need, NO_SPACE_ADVICE)

"""SHA-256 helpers shared by fetch, verify and doctor: hashing a file, comparing it, the digests' patterns."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from bake.byte_sizes import MIB

CHUNK = MIB
# A copy reads, hashes and writes blocks this large: few system calls, and hashlib releases the GIL.
COPY_BLOCK = 8 * MIB
# Whole values, used with fullmatch: ``$`` would also match before a final newline ("…1\n"). The
# ``\Z`` keeps a ``.match`` exact too.
SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")  # a lower-case hex SHA-256, as manifests and the cache spell it
GIT_SHA1_HEX = re.compile(r"[0-9a-f]{40}\Z")  # a git object id (a commit, a blob), as the Hub spells it
# What the Hub sends as a file's ETag: its git blob id, or an LFS file's sha256.
HUB_ETAG_HEX = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")
# The prefix pip, Docker and OCI write before a hex SHA-256 (``sha256:…``).
DIGEST_PREFIX = "sha256:"


def bare_sha256(value: object) -> object:
    """Return a SHA-256 as bake writes it: lower-case hex, without the ``sha256:`` prefix (any case).

    Anything that is not a string comes back as it is, for the caller's own check and message.
    """
    if not isinstance(value, str):
        return value
    lowered = value.lower()
    return lowered.removeprefix(DIGEST_PREFIX)


def sha256_file(path: str | Path, *, chunk: int = CHUNK) -> str:
    """Return the hex SHA-256 of a file's contents. Raises OSError if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def git_blob_id(data: bytes) -> str:
    """Return the git object id of a blob with these bytes (what the Hub calls a file's ``blobId``)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def file_matches(path: str | Path, sha256: str) -> bool:
    """Return whether the file at ``path`` hashes to ``sha256``. Raises OSError if unreadable."""
    return sha256_file(path) == sha256


def sha256_fd(fd: int, *, chunk: int = CHUNK) -> str:
    """Return the hex SHA-256 of what the file descriptor ``fd`` reads from where it is to its end.

    Raises OSError if unreadable."""
    digest = hashlib.sha256()
    while block := os.read(fd, chunk):
        digest.update(block)
    return digest.hexdigest()


def copy_hashed(
    source: int,
    target: int,
    *,
    size: int | None = None,
    block: int = COPY_BLOCK,
    each: Callable[[int], None] | None = None,
) -> tuple[str, int]:
    """Copy ``source`` to ``target`` (file descriptors) in one pass, hashing each block as it goes.

    ``size``, the bytes expected, sizes the buffer of a small file (ten thousand small files would
    each zero an 8 MiB one). Returns the hex SHA-256 of the bytes written and their count.
    ``each(total)`` is called after each block is written (progress; it may raise to stop the copy).
    Raises OSError as a read or write does.
    """
    digest = hashlib.sha256()
    buffer = bytearray(block if size is None else max(1, min(block, size + 1)))
    view = memoryview(buffer)
    total = 0
    while n := os.readv(source, [buffer]):
        chunk = view[:n]
        digest.update(chunk)
        while chunk:
            chunk = chunk[os.write(target, chunk) :]
        total += n
        if each is not None:
            each(total)
    return digest.hexdigest(), total

"""SHA-256 helpers shared by fetch, verify and doctor: hashing a file, comparing it, the digest's pattern."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from bake.units import MIB

CHUNK = MIB
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")  # a lower-case hex SHA-256, as manifests and the cache spell it


def sha256_file(path: str | Path, *, chunk: int = CHUNK) -> str:
    """Return the hex SHA-256 of a file's contents. Raises OSError if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_matches(path: str | Path, sha256: str) -> bool:
    """Return whether the file at ``path`` hashes to ``sha256``. Raises OSError if unreadable."""
    return sha256_file(path) == sha256

"""SHA-256 helpers shared by fetch, verify and doctor."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


def sha256_file(path: str | Path, *, chunk: int = CHUNK) -> str:
    """Return the hex SHA-256 of a file's contents. Raises OSError if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()

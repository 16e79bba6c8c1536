"""Shared by the fetch tests: a short backoff, deterministic bytes, one-asset fetches, a child process."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake import fetch
from bake.asset import Asset
from bake.fetch import FetchOptions, fetch_assets
from tests.runners import REPO

KIB = 1024
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries wait milliseconds, not seconds; tests of Retry-After set their own pause."""
    monkeypatch.setattr(fetch, "BACKOFF_BASE", 0.02)


def blob(size: int, seed: bytes = b"bake") -> bytes:
    """Deterministic incompressible bytes."""
    out = bytearray()
    block = hashlib.sha256(seed).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 32
    return bytes(out[:size])


def make_asset(
    data: bytes, *urls: str, name: str = "blob", path: str = "data/blob.bin", size: bool = True
) -> Asset:
    return Asset(name, path, hashlib.sha256(data).hexdigest(), tuple(urls), len(data) if size else None)


def opts(tmp_path: Path, **overrides: object) -> FetchOptions:
    settings = {"cache_dir": tmp_path / "cache", "timeout": 2.0, "attempts": 3, **overrides}
    return FetchOptions(**settings)


def files_under(root: Path) -> list[str]:
    """Every file below ``root``, hidden ones included, as sorted relative paths."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir())


def fetch_one(asset: Asset, tmp_path: Path, **overrides: object):
    (record,) = fetch_assets([asset], tmp_path / "dest", opts(tmp_path, **overrides))
    return record


CHILD = """
import sys
from pathlib import Path
from bake.fetch import FetchOptions, fetch_assets
from bake.asset import Asset
url, sha, size, dest, cache, connections = sys.argv[1:]
asset = Asset("blob", "data/blob.bin", sha, (url,), int(size))
options = FetchOptions(cache_dir=Path(cache), timeout=10, connections=int(connections))
fetch_assets([asset], Path(dest), options)
"""


def child(url: str, data: bytes, dest: Path, cache: Path, connections: int = 2) -> subprocess.Popen:
    args = [url, hashlib.sha256(data).hexdigest(), str(len(data)), str(dest), str(cache), str(connections)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stderr=subprocess.PIPE, text=True)

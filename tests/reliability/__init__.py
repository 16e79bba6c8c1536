"""Reliability suite helpers: the real `bake` CLI in a subprocess, manifests, seeded bytes, tree checks."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.isolation import NETWORK_ENV

REPO = Path(__file__).resolve().parents[2]
KIB = 1024
MIB = 1024 * KIB
INDEX_FILES = ("SHA256SUMS", "bake.lock.json")

# Lines for the terminal summary (the fault table), filled by the tests that measure something.
SUMMARY = pytest.StashKey[list[str]]()

# Settings of the machine running the tests that must not steer the fetches under test.
_FOREIGN_ENV = (*NETWORK_ENV, "SSL_CERT_FILE")


def blob(size: int, seed: object) -> bytes:
    """``size`` reproducible pseudo-random bytes for ``seed``."""
    return random.Random(f"bake-reliability-{seed}").randbytes(size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_text(assets: Iterable[Mapping[str, object]]) -> str:
    """Render ``[[asset]]`` tables; JSON strings, lists and integers are valid TOML values."""
    tables = []
    for asset in assets:
        lines = ["[[asset]]"] + [f"{key} = {json.dumps(value)}" for key, value in asset.items()]
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def asset_entry(name: str, path: str, data: bytes, *urls: str, size: bool = True) -> dict[str, object]:
    """One manifest entry for ``data`` served at ``urls``."""
    entry: dict[str, object] = {"name": name, "path": path, "sha256": sha256(data), "urls": list(urls)}
    if size:
        entry["size"] = len(data)
    return entry


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a `bake` subprocess: this checkout importable, no proxy/Hub/mirror settings."""
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def bake_command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "bake", *map(str, args)]


def bake(
    *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bake ARGS`` and return the finished process (exit code and stderr are real)."""
    return subprocess.run(
        bake_command(*args),
        env=cli_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def files_under(root: Path) -> list[str]:
    """Every non-directory below ``root`` (hidden files and links included), as sorted relative paths."""
    if not root.exists():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_symlink() or not p.is_dir())


def error_text(stderr: str) -> str:
    """The error report: stderr from the first ``bake: error:`` line on (progress and retry logs cut off)."""
    at = stderr.find("bake: error:")
    return stderr[at:] if at >= 0 else ""

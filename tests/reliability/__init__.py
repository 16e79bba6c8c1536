"""Reliability suite helpers: manifests, seeded bytes, tree checks; the `bake` runner is tests.runners'."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.assets import sha256
from tests.runners import REPO, bake, bake_command, cli_env

KIB = 1024
MIB = 1024 * KIB
INDEX_FILES = ("SHA256SUMS", "bake.lock.json")

# No engine answers here: a command that reached for one fails loudly instead of quietly succeeding.
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}

# Lines for the terminal summary (the fault table), filled by the tests that measure something.
SUMMARY = pytest.StashKey[list[str]]()


def blob(size: int, seed: object) -> bytes:
    """``size`` reproducible pseudo-random bytes for ``seed``."""
    return random.Random(f"bake-reliability-{seed}").randbytes(size)


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


def files_under(root: Path) -> list[str]:
    """Every non-directory below ``root`` (hidden files and links included), as sorted relative paths."""
    if not root.exists():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_symlink() or not p.is_dir())


def error_text(stderr: str) -> str:
    """The error report: stderr from the first ``bake: error:`` line on (progress and retry logs cut off)."""
    at = stderr.find("bake: error:")
    return stderr[at:] if at >= 0 else ""


__all__ = ["REPO", "bake", "bake_command", "cli_env", "sha256"]

"""bake.index: SHA256SUMS and bake.lock.json, written together, read back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bake import index
from bake.errors import UsageError
from bake.manifest import manifest_digest
from tests.baked import SMALL_FILES as FILES
from tests.baked import make_dest


def test_index_files_are_checkable_and_deterministic(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    index.write_index(dest, assets)
    first = {n: (dest / n).read_bytes() for n in ("SHA256SUMS", "bake.lock.json")}
    index.write_index(dest, list(reversed(assets)))
    assert {n: (dest / n).read_bytes() for n in first} == first
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dest, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    lock = json.loads(first["bake.lock.json"])
    assert lock["manifest_digest"] == manifest_digest(assets)
    assert [(e["path"], e["size"]) for e in lock["assets"]] == sorted((p, len(d)) for p, d in FILES.items())
    assert not [p for p in dest.iterdir() if p.name.endswith(".bake-tmp")]


def test_read_lock_round_trips(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    index.write_index(dest, assets)
    assert {(f.path, f.size, f.sha256) for f in index.read_lock(dest)} == {
        (a.path, len(FILES[a.path]), a.sha256) for a in assets
    }


def test_read_lock_missing_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the lock"):
        index.read_lock(tmp_path)

"""Part of measure 9: `bake harvest` of a Hub cache of N files (10,000 in the full profile), 1 in 100
with bytes that do not match its blob's name, into a new manifest each time; the median of 3 runs.

The cache is laid out as huggingface_hub writes it (blobs named by their git blob id, relative
snapshot links, a ref); every file is hashed and checked, and every bad one must be named.
"""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bake.hashes import git_blob_id

PER_DIR = 1000
BAD_EVERY = 100


def hub_cache(root: Path, count: int) -> int:
    """A Hub cache of ``count`` small files under ``root``; returns how many have bad bytes."""
    commit = hashlib.sha1(f"harvest {count}".encode()).hexdigest()
    repo = root / "datasets--bench--harvest"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    bad = 0
    for i in range(count):
        data = f"harvested file {i}\n".encode()
        blob = git_blob_id(data)
        if i % BAD_EVERY == BAD_EVERY - 1:
            data, bad = b"not the bytes its name says\n", bad + 1
        (repo / "blobs" / blob).write_bytes(data)
        link = repo / "snapshots" / commit / f"data/part{i // PER_DIR:02d}/f{i:05d}.txt"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"../../../../blobs/{blob}")
    return bad


def bench_harvest(src: Path, work: Path, count: int) -> dict:
    """Returns the median seconds, the file count and how many files were named as not pinned."""
    cache = work / "harvest-cache"
    bad = hub_cache(cache, count)
    times, named = [], []
    for run in range(3):
        manifest = work / f"harvested-{run}.toml"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "bake", "harvest", str(cache), "--manifest", str(manifest)],
            cwd=src, check=True, capture_output=True, text=True,
        )  # fmt: skip
        times.append(time.perf_counter() - t0)
        named.append(proc.stderr.count("bake: not pinned:"))
    return {
        "harvest_files": count,
        "harvest_bad_files": bad,
        "harvest_not_pinned": min(named),
        "harvest_seconds": statistics.median(times),
    }

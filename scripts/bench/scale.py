"""Measure 9: cost at scale. Job start at 10, 1,000 and 10,000 files, and digest and seal at 10,000.

One declared consumer, `${BENCH_CACHE:-$HOME/.cache}/bench`, holds N small files in directories of
at most 1,000; the entrypoint runs under /bin/sh (dash on Debian) with `true` as the job. Per N:
  fresh   the location does not exist (the container's own filesystem: the linked view);
  empty   the location is an empty directory;
  served  the location was served by an earlier start (the stamp proves it);
  cp -rs  one `cp -rs` making the same tree of links, run side by side with `fresh`;
  node    a directory that already holds data (node storage: the copied view), first start, then
  node served, later starts.
A pinned Hub repository of N files is served the same ways (`hub fresh`, `hub served`): its commit
is linked whole. `bake manifest digest` and `bake seal` run on the Hub repository of the largest N,
and `bake harvest` on a Hub cache of that many files, 1 in 100 of them damaged (bench/harvest.py).
Every figure is a median; the plot (docs/performance-scale.png) draws them on log-log axes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bake.hashes import git_blob_id
from bench.common import Profile, log
from bench.harvest import bench_harvest

CONSUMER = "bench"
PER_DIR = 1000
CASES = ("fresh", "empty", "served", "cp -rs", "node", "node served", "hub fresh", "hub served")


def _write_tree(dest: Path, root: str, count: int) -> dict[str, bytes]:
    """``count`` small files under ``dest/root``, in directories of PER_DIR; returns path -> bytes."""
    files = {}
    for i in range(count):
        rel = f"{root}/part{i // PER_DIR:02d}/f{i:05d}.bin"
        data = f"bench file {i}\n".encode()
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
        files[rel] = data
    return files


def _seal(src: Path, manifest: Path, dest: Path) -> None:
    """Index ``dest`` as `bake fetch` would have, then `bake seal` it."""
    sys.path.insert(0, str(src))
    from bake.index import write_index
    from bake.manifest import load_manifest

    write_index(dest, load_manifest(manifest))
    subprocess.run(
        [sys.executable, "-m", "bake", "seal", "--manifest", str(manifest), "--dest", str(dest)],
        cwd=src, check=True, capture_output=True,
    )  # fmt: skip


def declared_assets(src: Path, work: Path, count: int) -> Path:
    """A sealed asset directory: ``count`` files of one declared consumer."""
    dest = work / f"assets-{count}"
    files = _write_tree(dest, CONSUMER, count)
    lines = [f'[[consumer]]\nname = "{CONSUMER}"\nlocations = ["${{BENCH_CACHE:-$HOME/.cache}}/bench"]\n']
    for rel, data in files.items():
        lines.append(
            f'[[asset]]\nname = "{rel.replace("/", "-")}"\npath = "{rel}"\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nurls = ["https://bench.invalid/{rel}"]\n'
        )
    manifest = work / f"declared-{count}.toml"
    manifest.write_text("\n".join(lines))
    _seal(src, manifest, dest)
    return dest


def hub_manifest(work: Path, count: int) -> tuple[Path, dict[str, bytes]]:
    """A [[hub]] entry pinning ``count`` files (a dataset repository); returns it and its blobs."""
    commit = hashlib.sha1(f"bench {count}".encode()).hexdigest()
    records, blobs = [], {}
    for i in range(count):
        data = f"hub file {i}\n".encode()
        blob = git_blob_id(data)
        sha = hashlib.sha256(data).hexdigest()
        path = f"data/part{i // PER_DIR:02d}/f{i:05d}.txt"
        records.append(f'  {{path = "{path}", size = {len(data)}, sha256 = "{sha}", blob = "{blob}"}},')
        blobs[blob] = data
    text = f'[[hub]]\nrepo = "bench/data"\ntype = "dataset"\ncommit = "{commit}"\nref = "main"\nfiles = [\n'
    manifest = work / f"hub-{count}.toml"
    manifest.write_text(text + "\n".join(records) + "\n]\n")
    return manifest, blobs


def hub_assets(src: Path, work: Path, count: int) -> Path:
    """A sealed asset directory holding one Hub repository of ``count`` files."""
    manifest, blobs = hub_manifest(work, count)
    dest = work / f"hub-assets-{count}"
    for blob, data in blobs.items():
        path = dest / "hub" / "datasets--bench--data" / "blobs" / blob
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    _seal(src, manifest, dest)
    return dest


class Timer:
    """Runs commands in ``work`` with a fixed environment and times them, in milliseconds."""

    def __init__(self, src: Path, work: Path) -> None:
        self.entrypoint = str(src / "scripts/entrypoint.sh")
        self.work = work
        self.runs = 0
        (work / "home").mkdir(exist_ok=True)
        (work / "tmp").mkdir(exist_ok=True)

    def env(self, assets: Path, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.work / "home"),
            "TMPDIR": str(self.work / "tmp"),
            "BAKE_ASSETS": str(assets),
            "BAKE_QUIET": "1",
            **extra,
        }

    def place(self) -> Path:
        """A new directory for one run's location (new names: this machine's ext4 is slow to
        re-create many entries where a tree was just removed)."""
        self.runs += 1
        path = self.work / "runs" / f"r{self.runs}"
        path.mkdir(parents=True)
        return path

    def time(self, argv: list[str], env: dict[str, str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            argv, env=env, cwd=self.work, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return (time.perf_counter() - t0) * 1000

    def start(self, assets: Path, **extra: str) -> float:
        return self.time(["/bin/sh", self.entrypoint, "true"], self.env(assets, **extra))


def _declared_row(timer: Timer, assets: Path, runs: int) -> dict[str, float]:
    """The declared consumer's cases, each a median of ``runs``, fresh and cp -rs interleaved."""
    fresh, copies, empty, node = [], [], [], []
    for _ in range(runs):
        fresh.append(timer.start(assets, BENCH_CACHE=str(timer.place())))
        target = timer.place() / "bench"
        copies.append(timer.time(["cp", "-rs", str(assets / CONSUMER), str(target)], timer.env(assets)))
        place = timer.place()
        (place / "bench").mkdir()
        empty.append(timer.start(assets, BENCH_CACHE=str(place)))
    served_at = timer.place()
    for _ in range(3):  # served, then stamped once its directories are older than a stamp
        timer.start(assets, BENCH_CACHE=str(served_at))
    served = [timer.start(assets, BENCH_CACHE=str(served_at)) for _ in range(max(runs, 20))]
    for _ in range(min(runs, 3)):
        place = timer.place()
        (place / "bench").mkdir()
        (place / "bench" / "someone else's.bin").write_bytes(b"node data")
        node.append(timer.start(assets, BENCH_CACHE=str(place)))
    for _ in range(3):
        timer.start(assets, BENCH_CACHE=str(place))
    node_served = [timer.start(assets, BENCH_CACHE=str(place)) for _ in range(max(runs, 20))]
    row = {"fresh": fresh, "empty": empty, "served": served, "cp -rs": copies}
    row |= {"node": node, "node served": node_served}
    return {case: statistics.median(values) for case, values in row.items()}


def _hub_row(timer: Timer, assets: Path, runs: int) -> dict[str, float]:
    fresh = [timer.start(assets, HF_HOME=str(timer.place())) for _ in range(runs)]
    home = timer.place()
    for _ in range(3):
        timer.start(assets, HF_HOME=str(home))
    served = [timer.start(assets, HF_HOME=str(home)) for _ in range(max(runs, 20))]
    return {"hub fresh": statistics.median(fresh), "hub served": statistics.median(served)}


def _python_seconds(src: Path, work: Path, count: int) -> dict[str, float]:
    """`bake manifest digest` and `bake seal` (a second, idempotent one) on the Hub repository."""
    manifest, _ = hub_manifest(work, count)
    dest = work / f"hub-assets-{count}"
    out = {}
    for name, args in (
        ("digest_seconds", ["manifest", "digest", "--manifest", str(manifest)]),
        ("seal_seconds", ["seal", "--manifest", str(manifest), "--dest", str(dest)]),
    ):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bake", *args], cwd=src, check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def bench_scale(profile: Profile, src: Path, work: Path) -> dict:
    """Measure 9. Returns per file count the median milliseconds of every case, and the Python seconds."""
    root = work / "scale"
    root.mkdir()
    timer = Timer(src, root)
    rows = {}
    for count in profile.scale_counts:
        runs = 5 if count >= 10000 else 10
        log(f"scale: {count} files")
        declared = declared_assets(src, root, count)
        hub = hub_assets(src, root, count)
        rows[str(count)] = _declared_row(timer, declared, runs) | _hub_row(timer, hub, runs)
        shutil.rmtree(root / "runs")
    largest = max(profile.scale_counts)
    result = {"shell": os.path.realpath("/bin/sh"), "files": rows, "hub_files": largest}
    result |= _python_seconds(src, root, largest)
    result |= bench_harvest(src, root, largest)
    # What ten times the files costs: the largest count against the one before it.
    small, large = (str(c) for c in sorted(profile.scale_counts)[-2:])
    result["ratio_of"] = [int(small), int(large)]
    result["ratios"] = {case: rows[large][case] / rows[small][case] for case in CASES}
    log(f"scale: {json.dumps(rows[large])}")
    return result

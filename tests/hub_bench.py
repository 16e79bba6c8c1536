"""Measure the Hub paths on a loopback Hub: both downloaders side by side, and `bake add hf://` at scale.

Downloaders: one repository (an LFS file of ``--size-mib`` plus small files) is pinned
with ``bake add``; then ``bake fetch`` runs cold (fresh cache and destination) with each
downloader in turn, interleaved, ``--runs`` times, on an unthrottled CDN and on one
capped per connection. It prints medians and writes JSON::

    python -m tests.hub_bench [--size-mib 256] [--runs 3] [--rate-mib 32] [--json OUT]

huggingface_hub is forced onto plain HTTP (HF_HUB_DISABLE_XET=1): a loopback Hub cannot speak Xet.

Adding at scale: ``bake add hf://`` of repositories of N files (the Hub's paged tree
listing, 1,000 entries a page), once with LFS files only (hashes from the listing) and
once with small files (each read and hashed), medians of ``--runs``::

    python -m tests.hub_bench --add-scale [--add-files 1000,10000,100000] [--small-files 1000,10000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.hub_server import LoopbackHub, Unserved

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _data(size: int) -> bytes:
    block = hashlib.sha256(b"hub bench").digest() * (MIB // 32)
    return (block * (size // len(block) + 1))[:size]


def _bake(*args: str, env: dict) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "bake", *args], capture_output=True, text=True, env=full, check=False
    )


def _one_run(manifest: Path, work: Path, downloader: str, env: dict) -> float:
    text = manifest.read_text().replace('downloader = "huggingface_hub"\n', "")
    if downloader != "bake":
        text = text.replace('commit = "', 'downloader = "huggingface_hub"\ncommit = "')
    run_manifest = work / f"{downloader}.toml"
    run_manifest.write_text(text)
    dest, cache = work / f"dest-{downloader}", work / f"cache-{downloader}"
    for path in (dest, cache):
        shutil.rmtree(path, ignore_errors=True)
    t0 = time.monotonic()
    proc = _bake(
        "fetch",
        "--manifest",
        str(run_manifest),
        "--dest",
        str(dest),
        "--cache-dir",
        str(cache),
        "-q",
        env=env,
    )
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bake fetch with {downloader} failed: {proc.stderr}")
    return seconds


def measure(size_mib: int, runs: int, rate_mib: float | None) -> dict:
    """Return {downloader: [seconds, …]} for one CDN setting."""
    with tempfile.TemporaryDirectory(prefix="hub-bench-") as tmp:
        work = Path(tmp)
        hub = LoopbackHub(work / "hub", rate=rate_mib * MIB if rate_mib else None)
        hub.commit(
            "bench/model",
            {
                "model.safetensors": (_data(size_mib * MIB), True),
                "config.json": b'{"hidden_size": 8}\n',
                "tokenizer.json": _data(2 * MIB)[::2],
                "tokenizer_config.json": b"{}\n",
            },
        )
        with hub:
            env = {
                "HF_ENDPOINT": hub.endpoint,
                "HF_HUB_DISABLE_XET": "1",
                "XDG_CACHE_HOME": str(work / "xdg"),
            }
            env |= {"HF_HOME": str(work / "hf-home"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
            manifest = work / "assets.toml"
            added = _bake("add", "hf://bench/model", "--manifest", str(manifest), env=env)
            if added.returncode != 0:
                raise SystemExit(f"bake add failed: {added.stderr}")
            times: dict[str, list[float]] = {"bake": [], "huggingface_hub": []}
            for _ in range(runs):
                for downloader in times:
                    times[downloader].append(_one_run(manifest, work, downloader, env))
    return times


def scale_files(count: int, lfs: bool) -> dict:
    """``count`` files in 100-file directories: LFS files listed only, or small files served inline."""
    files = {}
    for i in range(count):
        path = f"shard-{i // 100:04d}/part-{i:06d}." + ("safetensors" if lfs else "json")
        if lfs:
            files[path] = Unserved(size=1_000_000 + i, sha256=hashlib.sha256(path.encode()).hexdigest())
        else:
            files[path] = b'{"i": %d}\n' % i
    return files


def measure_add(counts: list[int], lfs: bool, runs: int) -> dict[int, list[float]]:
    """Return {files: [seconds of `bake add hf://`, …]}: each repository added ``runs`` times, cold."""
    times: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hub-bench-add-") as tmp:
        work = Path(tmp)
        hub = LoopbackHub(work / "hub")
        for count in counts:
            hub.commit(f"bench/scale-{count}", scale_files(count, lfs))
        with hub:
            env = {
                "HF_ENDPOINT": hub.endpoint,
                "XDG_CACHE_HOME": str(work / "xdg"),
                "HF_HOME": str(work / "hf"),
            }
            for count in counts:
                times[count] = []
                for run in range(runs):
                    manifest = work / f"add-{count}-{run}.toml"
                    t0 = time.monotonic()
                    added = _bake("add", f"hf://bench/scale-{count}", "--manifest", str(manifest), env=env)
                    times[count].append(time.monotonic() - t0)
                    if added.returncode != 0:
                        raise SystemExit(f"bake add of {count} files failed: {added.stderr}")
    return times


def report_add(counts: list[int], small: list[int], runs: int) -> dict:
    """Print and return the medians of `bake add hf://` at each size, and each size's ratio to the first."""
    results = {}
    for label, lfs, sizes in (("LFS files", True, counts), ("small files", False, small)):
        if not sizes:
            continue
        medians = {n: statistics.median(t) for n, t in measure_add(sizes, lfs, runs).items()}
        results[label] = medians
        base = sizes[0]
        shown = " · ".join(
            f"{n:,} files {medians[n]:.1f} s ({medians[n] / medians[base]:.1f}x {base:,})" for n in sizes
        )
        print(f"bake add hf://, {label}: {shown} (medians of {runs})")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate-mib", type=float, default=32.0, help="CDN cap per connection, MiB/s")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--add-scale", action="store_true", help="measure bake add hf:// at scale instead")
    parser.add_argument("--add-files", default="1000,10000,100000", help="LFS-file counts, comma-separated")
    parser.add_argument("--small-files", default="1000,10000", help="small-file counts, comma-separated")
    args = parser.parse_args(argv)
    if args.add_scale:
        sizes = [[int(n) for n in spec.split(",") if n] for spec in (args.add_files, args.small_files)]
        results = report_add(*sizes, args.runs)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return 0
    results = {}
    for label, rate in (("unthrottled", None), (f"{args.rate_mib:g} MiB/s per connection", args.rate_mib)):
        times = measure(args.size_mib, args.runs, rate)
        results[label] = {d: {"runs": t, "median": statistics.median(t)} for d, t in times.items()}
        bake_s, hub_s = (results[label][d]["median"] for d in ("bake", "huggingface_hub"))
        print(
            f"{label:>28}: bake {bake_s:6.2f} s · huggingface_hub {hub_s:6.2f} s "
            f"· ratio {hub_s / bake_s:.2f} (medians of {args.runs}, {args.size_mib} MiB LFS)"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Measure 10: the runner's line, where vLLM's native runner calls it, by the count of locations.

The line is ``bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"``. Each timed
run is a job of its own, as ``initialize_native_environment`` leaves it: bash with
``-o pipefail``, a fresh ``TMPDIR`` and ``XDG_CACHE_HOME`` that the runner's ``mkdir -p`` has
just made, and the node's ``HF_HOME`` (its ``TIKTOKEN_RS_CACHE_DIR`` holding the fleet's other
files) that an earlier job has already seeded. The cost is the median of the runs with the line
minus the median of the same runs without it, interleaved. At 2 files the three built-in
locations are served; each further location is a declared consumer with one small file.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import BenchError, Profile, log
from bench.entrypoint import production_files, seal_files
from bench.processes import run

RUNNER_LINE = 'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
BUILT_IN_LOCATIONS = 3  # s3tokenizer under XDG_CACHE_HOME, TIKTOKEN_RS_CACHE_DIR, TIKTOKEN_CACHE_DIR
EXTRA_LOCATIONS = (0, 6, 24)
# The job: what initialize_native_environment sets and makes (the per-job part from $1), then $2.
JOB = """set -e
export TMPDIR="$JOBS/$1/tmp" XDG_CACHE_HOME="$JOBS/$1/cache/xdg"
mkdir -p "$TMPDIR" "$XDG_CACHE_HOME" "$HF_HOME" "$TIKTOKEN_RS_CACHE_DIR"
eval "$2"
"""
TARGET_MS = 10
# Linear: the cost of one more location is about the same at every count; between the counts
# measured, the steeper step costs at most twice the other per location (or 1 ms: noise).
LINEAR_FACTOR = 2
NOISE_MS = 1


def _consumers(extra: int) -> tuple[str, dict[str, bytes]]:
    """``extra`` declared consumers, each with one location under XDG_CACHE_HOME and one 4 KiB file."""
    tables, files = [], {}
    for i in range(extra):
        tables.append(
            f'[[consumer]]\nname = "c{i}"\nlocations = ["${{XDG_CACHE_HOME:-$HOME/.cache}}/c{i}"]\n'
        )
        files[f"c{i}/model.bin"] = random.Random(100 + i).randbytes(4096)
    return "\n".join(tables), files


def _cost(profile: Profile, root: Path, assets: Path, bin_dir: Path, log_path: Path) -> dict:
    """Median ms of the job with the line, without it, and their difference, for one asset directory."""
    hf_home = root / "hf"
    rs_cache = hf_home / "tiktoken-rs-cache"
    rs_cache.mkdir(parents=True)
    (rs_cache / "fleet-vocab").write_bytes(b"another job's vocab\n")  # node storage: it holds data
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(root / "home"),
        "JOBS": str(root / "jobs"),
        "BAKE_ASSETS": str(assets),
        "HF_HOME": str(hf_home),
        "TIKTOKEN_RS_CACHE_DIR": str(rs_cache),
    }
    job = ["bash", "-o", "pipefail", "-c", JOB, "job"]
    run([*job, "seed", RUNNER_LINE], log_path=log_path, cwd=root, env=env)  # the earlier job
    vocab = next(p for p in production_files() if p.startswith("tiktoken/"))
    seeded = rs_cache / vocab.removeprefix("tiktoken/")
    if not seeded.is_file() or seeded.is_symlink():
        hint = (
            ""
            if shutil.which("bake", path=env["PATH"])
            else "; no `bake` on PATH for `bake seed`: put .venv/bin first"
        )
        raise BenchError(f"the earlier job did not seed {seeded} with a verified copy{hint}; see {log_path}")

    def once(name: str, line: str) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            [*job, name, line], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=True,
        )  # fmt: skip
        return (time.perf_counter() - t0) * 1000

    with_line, without = [], []
    for i in range(profile.entrypoint_runs):
        with_line.append(once(f"line-{i}", RUNNER_LINE))
        without.append(once(f"bare-{i}", ":"))
    return {
        "median_ms_with_line": statistics.median(with_line),
        "median_ms_without": statistics.median(without),
        "line_ms": statistics.median(with_line) - statistics.median(without),
    }


def bench_runner_line(
    profile: Profile, src: Path, work: Path, extra_locations: tuple[int, ...] = EXTRA_LOCATIONS
) -> dict:
    """Measure 10: the runner's line's cost at 3, 9 and 27 locations (2, 8 and 26 files), or at 3 plus
    each of ``extra_locations``."""
    log_path = work / "logs" / "runner-line.log"
    bin_dir = work / "runner-line" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "bake-entrypoint").symlink_to(src / "scripts/entrypoint.sh")
    by_locations = {}
    for extra in extra_locations:
        root = work / "runner-line" / f"extra-{extra}"
        consumers, files = _consumers(extra)
        assets = seal_files(src, root, {**production_files(), **files}, log_path, consumers)
        cost = _cost(profile, root, assets, bin_dir, log_path)
        by_locations[str(BUILT_IN_LOCATIONS + extra)] = {"files": 2 + extra, **cost}
    counts = sorted(by_locations, key=int)
    # The cost of one more location, between each count measured and the next.
    steps = {
        f"{a}-{b}": (by_locations[b]["line_ms"] - by_locations[a]["line_ms"]) / (int(b) - int(a))
        for a, b in itertools.pairwise(counts)
    }
    result = {
        "runs": profile.entrypoint_runs,
        "shell": "bash -o pipefail",
        "line": RUNNER_LINE,
        "locations": by_locations,
        "line_ms_two_files": by_locations[counts[0]]["line_ms"],
        "ms_per_location": steps,
    }
    log(
        f"runner line: {result['line_ms_two_files']:.2f} ms at 2 files ({counts[0]} locations); per "
        f"further location " + ", ".join(f"{v:.2f} ms ({k})" for k, v in steps.items())
    )
    return result


def runner_line_row(m: dict) -> tuple[str, bool]:
    """Row 10 of the verdicts."""
    rl = m["runner_line"]
    seen = ", ".join(f"{n} locations {v['line_ms']:.2f} ms" for n, v in rl["locations"].items())
    steps = rl["ms_per_location"].values()
    per = ", ".join(f"{v:.2f} ms ({k})" for k, v in rl["ms_per_location"].items())
    return (
        f"`{rl['line']}` in a fresh job (TMPDIR, XDG_CACHE_HOME just made; HF_HOME seeded before), "
        f"{rl['shell']}, median of {rl['runs']}: {seen}; per further location {per}",
        rl["line_ms_two_files"] <= TARGET_MS and max(steps) <= max(LINEAR_FACTOR * min(steps), NOISE_MS),
    )

"""Old against new: the engine's cold fetch (measure 1), the entrypoint's start (measure 7) and the
runner's line at 2 files (measure 10) on two commits, interleaved, medians of 3 rounds, so a
regression shows beyond the machine's noise.

    scripts/bench.py --compare OLD [--smoke]     (OLD: a commit, e.g. the round's first)

Each round measures OLD, then this checkout, against the same throttled mirror and the same
files; the ratio new / old of the medians is the verdict (noise here is about +-5 %).
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

from bench.common import BENCH_MANIFEST, CHECKPOINT_MIRROR_PATH, MIB, REPO, Profile, log
from bench.entrypoint import bench_entrypoint
from bench.fetchers import Fetcher
from bench.files import bench_manifest, generate, snapshot
from bench.processes import mirror
from bench.runner_line import bench_runner_line

ROUNDS = 3


def _checkout(rev: str, dest: Path, manifest_text: str) -> Path:
    """The tree of ``rev`` at ``dest`` (git archive: no worktree of this repository), with the manifest."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / BENCH_MANIFEST).write_text(manifest_text)
    return dest


def bench_compare(profile: Profile, old: str, work: Path, logs: Path) -> dict:
    """Medians of ``ROUNDS`` interleaved rounds, for ``old`` and this checkout; their ratios."""
    root = work / "mirror"
    log(f"compare {old} with this checkout: generating {profile.size / MIB:.0f} MiB")
    sha256 = generate(root / CHECKPOINT_MIRROR_PATH, profile.size)
    text = bench_manifest(sha256, profile.size)
    trees = {"old": _checkout(old, work / "old", text), "new": snapshot(work / "new", text)}
    fetchers = {
        name: Fetcher(src, work, logs, src / BENCH_MANIFEST, sha256, profile.size)
        for name, src in trees.items()
    }
    fetch: dict[str, list[float]] = {"old": [], "new": []}
    served: dict[str, list[float]] = {"old": [], "new": []}
    unset: dict[str, list[float]] = {"old": [], "new": []}
    line: dict[str, list[float]] = {"old": [], "new": []}
    with mirror(trees["new"], root, logs, rate=profile.rate) as origin:
        for round_ in range(ROUNDS):
            for name in ("old", "new"):
                fetch[name].append(fetchers[name].bake(origin.url, profile.connections))
                round_work = work / f"ep-{name}-{round_}"
                (round_work / "logs").mkdir(parents=True)
                start = bench_entrypoint(profile, trees[name], round_work)
                served[name].append(start["overhead_ms"])
                unset[name].append(start["overhead_ms_unset"])
                at_two_files = bench_runner_line(profile, trees[name], round_work, (0,))
                line[name].append(at_two_files["line_ms_two_files"])
            log(f"round {round_ + 1}: fetch {fetch['old'][-1]:.2f} s / {fetch['new'][-1]:.2f} s")
    result = {"old": old, "rounds": ROUNDS}
    for label, values, unit in (
        ("fetch", fetch, "s"),
        ("entrypoint", served, "ms"),
        ("entrypoint_unset", unset, "ms"),
        ("runner_line", line, "ms"),
    ):
        old_median, new_median = statistics.median(values["old"]), statistics.median(values["new"])
        result[label] = {"unit": unit, "old": old_median, "new": new_median, "ratio": new_median / old_median}
    return result


def compare_table(result: dict) -> str:
    """The comparison as a Markdown table: each measure's medians and new / old."""
    lines = [
        f"old = {result['old']}, new = this checkout; medians of {result['rounds']} interleaved rounds",
        "",
    ]
    lines += ["| measure | old | new | new / old |", "|---|---:|---:|---:|"]
    names = {
        "fetch": "cold fetch (measure 1)",
        "entrypoint": "entrypoint, served",
        "entrypoint_unset": "entrypoint, unset",
        "runner_line": "runner line, 2 files (measure 10)",
    }
    for key, name in names.items():
        m = result[key]
        lines.append(
            f"| {name} | {m['old']:.2f} {m['unit']} | {m['new']:.2f} {m['unit']} | {m['ratio']:.3f} |"
        )
    return "\n".join(lines)

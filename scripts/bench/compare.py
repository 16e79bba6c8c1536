"""Old against new: the engine's cold fetch (measure 1), the entrypoint's start (measure 7), the
runner's line at 2 files (measure 10) and the entrypoint at the most files measure 9 serves (fresh,
and served) on two commits, interleaved, medians of 3 rounds, so a regression shows beyond the
machine's noise.

    scripts/bench.py --compare OLD [--smoke]     (OLD: a commit, e.g. the round's first)

Each round measures OLD, then this checkout, against the same throttled mirror and the same
files; the ratio new / old of the medians is the verdict (noise here is about +-5 %).
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Mapping
from pathlib import Path

from bench.common import BENCH_MANIFEST, CHECKPOINT_MIRROR_PATH, MIB, REPO, Profile, log
from bench.entrypoint import bench_entrypoint
from bench.fetchers import Fetcher
from bench.files import bench_manifest, generate, snapshot
from bench.processes import mirror
from bench.runner_line import bench_runner_line
from bench.scale import Timer, declared_assets

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
    scale = {name: _Scale(profile, src, work / f"scale-{name}") for name, src in trees.items()}
    fresh_at: dict[str, list[float]] = {"old": [], "new": []}
    served_at: dict[str, list[float]] = {"old": [], "new": []}
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
                fresh, served_ms = scale[name].round()
                fresh_at[name].append(fresh)
                served_at[name].append(served_ms)
            log(f"round {round_ + 1}: fetch {fetch['old'][-1]:.2f} s / {fetch['new'][-1]:.2f} s")
    result = {"old": old, "rounds": ROUNDS, "scale_files": max(profile.scale_counts)}
    for label, values, unit in (
        ("fetch", fetch, "s"),
        ("entrypoint", served, "ms"),
        ("entrypoint_unset", unset, "ms"),
        ("runner_line", line, "ms"),
        ("scale_fresh", fresh_at, "ms"),
        ("scale_served", served_at, "ms"),
    ):
        old_median, new_median = statistics.median(values["old"]), statistics.median(values["new"])
        result[label] = {"unit": unit, "old": old_median, "new": new_median, "ratio": new_median / old_median}
    return result


# Each row of the comparison: its key in the result, the registry's measure number, and what part of
# that measure it is ("{files}": the most files measure 9 serves).
ROWS = (
    ("fetch", 1, "8 connections"),
    ("entrypoint", 7, "served"),
    ("entrypoint_unset", 7, "unset"),
    ("runner_line", 10, "2 files"),
    ("scale_fresh", 9, "{files} files, fresh"),
    ("scale_served", 9, "{files} files, served"),
)


def compare_table(result: dict, names: Mapping[int, str]) -> str:
    """The comparison as a Markdown table: each measure's medians and new / old, each row named by the
    registry's ``names`` (measure number -> name)."""
    lines = [
        f"old = {result['old']}, new = this checkout; medians of {result['rounds']} interleaved rounds",
        "",
    ]
    lines += ["| measure | old | new | new / old |", "|---|---:|---:|---:|"]
    files = f"{result['scale_files']:,}"
    for key, number, part in ROWS:
        m = result[key]
        name = f"{names[number]}, {part.format(files=files)} (measure {number})"
        lines.append(
            f"| {name} | {m['old']:.2f} {m['unit']} | {m['new']:.2f} {m['unit']} | {m['ratio']:.3f} |"
        )
    return "\n".join(lines)


class _Scale:
    """Measure 9's fresh and served starts at its most files, for one tree: its own sealed assets."""

    def __init__(self, profile: Profile, src: Path, work: Path) -> None:
        work.mkdir(parents=True)
        self.assets = declared_assets(src, work, max(profile.scale_counts))
        self.timer = Timer(src, work)
        self.served = self.timer.place()
        for _ in range(3):  # served, then stamped once its directories are older than the stamp
            self.timer.start(self.assets, BENCH_CACHE=str(self.served))

    def round(self) -> tuple[float, float]:
        """One round: the median of 3 fresh starts, and of 20 served ones, in ms."""
        fresh = [self.timer.start(self.assets, BENCH_CACHE=str(self.timer.place())) for _ in range(3)]
        served = [self.timer.start(self.assets, BENCH_CACHE=str(self.served)) for _ in range(20)]
        return statistics.median(fresh), statistics.median(served)

"""The verdicts (one row per measure of the registry, against its target) and the table the bench prints."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from bench.common import SMOKE, BenchError, log
from bench.measures import MEASURES


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )

    def version(*cmd: str) -> str:
        exe = shutil.which(cmd[0], path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        proc = subprocess.run([exe or cmd[0], *cmd[1:]], capture_output=True, text=True, check=False)
        return (
            proc.stdout.strip().splitlines()[0]
            if proc.returncode == 0 and proc.stdout.strip()
            else "unavailable"
        )

    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "engine": version("dockerd", "--version"),
        "buildx": version("docker", "buildx", "version"),
        "aria2c": version("aria2c", "--version"),
    }


def verdicts(m: dict) -> list[dict]:
    """One row per measure the run made, in the registry's order: what was seen, the target, whether met."""
    found = []
    for measure in MEASURES:
        if measure.row is None or measure.key not in m:
            continue
        result, met = measure.row(m)
        name = f"{measure.number}. {measure.name}"
        found.append({"measure": name, "result": result, "target": measure.target, "met": met})
    return found


def table(report: dict) -> str:
    """The results as a markdown table, the machine on the line above."""
    mach = report["machine"]
    lines = [
        f"Machine: {mach['nproc']} CPUs ({mach['cpu']}), {mach['memory_gib']} GiB RAM, "
        f"Linux {mach['kernel']}, Python {mach['python']}; {mach['engine']}; {mach['buildx']}; "
        f"{mach['aria2c']}. Profile {report['profile']}: {report['seconds']:.0f} s in all.",
        "",
        "| measure | result | target | met |",
        "|---|---|---|---|",
    ]
    for row in report["targets"]:
        lines.append(
            f"| {row['measure']} | {row['result']} | {row['target']} | {'yes' if row['met'] else 'NO'} |"
        )
    if report["profile"] == SMOKE.name and "cold_fetch" in report["measures"]:
        limit = report["measures"]["cold_fetch"]["limit_seconds"]
        lines += [
            "",
            f"Smoke profile: against a {limit:.2f} s transfer, process start-up decides the timing ratios; "
            "the timing targets are judged on the full run (scripts/bench.py).",
        ]
    return "\n".join(lines)


def publish(report: dict, out: Path, plot: Path | None, draw: Callable[[dict, Path, str], None]) -> bool:
    """Write the JSON and print the table, then draw measure 9 at ``plot``; return whether all of it landed.

    The figures come first and always land: a missing plotter (matplotlib) costs the plot alone,
    said on stderr, never the run's minutes of measuring.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"\nJSON: {out}")
    if plot is None:
        return True
    scale = report["measures"]["scale"]
    try:
        draw(scale, plot, f"bake-entrypoint at scale, {scale['shell']}")
    except BenchError as exc:
        log(f"no plot: {exc}; the table and {out} hold every figure")
        return False
    log(f"plot: {plot}")
    return True

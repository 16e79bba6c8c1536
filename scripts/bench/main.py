"""Benchmark bake side by side with its peers, and the reuse of its asset layer.

    scripts/bench.py [--smoke] [--scale | --layers | --pull | --hub-units | --round-trips [OLD]
        | --compare OLD | --copied | --signing] [--plot PNG] [--json OUT]
        (as root; default OUT .work/bench.json)

One run measures every measure but 13 and prints their verdicts as a table; a mode (the exclusive group)
runs some alone. The measures (number, name, what, the step that measures it, whether that needs the
toolchain, target, the modes that run it) are one registry, scripts/bench/measures.py, which also
holds the modes; `scripts/bench.py --help` lists both. Four modes print tables of their own:
--round-trips [OLD] runs measure 13 alone: the registry requests and round trips of `bake publish` and
`bake pin` per unit, through a proxy that delays each request (bench/round_trips.py); with OLD, on that
commit's bake too, side by side.
--copied builds and pushes an image holding two units in each Dockerfile shape, each way, on both
stores, and names each pushed layer's blob (bench/copied.py).
--signing publishes and pins a three-unit manifest plain and signed (cosign, a key pair made for the
run), in fresh repositories, rounds interleaved: what signing adds to each (bench/signing.py).
--compare OLD measures 1, 7, 10 (at 2 files) and 9 (fresh and served, at its most files) on commit OLD and
on this checkout, interleaved, medians of three rounds (bench/compare.py): no regression beyond noise.
Everything listens on 127.0.0.1 only, and every process it starts is stopped by pid.
The builds use a snapshot of this checkout (tracked and unignored files as they are
now), so edits made while it runs cannot reach them. --smoke is the same with a
small file and fewer runs, for CI: it prints the figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import FULL, PROXY_VARS, REPO, SMOKE, Profile, log
from bench.measures import FULL_RUN, MEASURES, MODES, Context, Mode, Step, prepare
from bench.plot import draw
from bench.report import machine, publish, verdicts

PLOT = REPO / "docs/performance-scale.png"


def toolchain() -> tuple[str, bool]:
    """Make sure the engine, buildx, registry and stand-ins are ready; return (registry, started here)."""
    script = REPO / "scripts/toolchain.sh"
    started = False
    if subprocess.run([str(script), "status"], capture_output=True, check=False).returncode != 0:
        log("toolchain not ready; running scripts/toolchain.sh up")
        subprocess.run([str(script), "up"], check=True)
        started = True
    env_lines = subprocess.run([str(script), "env"], capture_output=True, text=True, check=True).stdout
    values = dict(
        line.removeprefix("export ").split("=", 1) for line in env_lines.splitlines() if "=" in line
    )
    return values["BAKE_REGISTRY"], started


def _measure(context: Context, steps: tuple[Step, ...]) -> dict:
    """Run ``steps`` in ``context``; return their figures, and the generated file when there is one."""
    generated = prepare(context, steps)
    measures: dict = {}
    for step in steps:
        measures.update(step.measure(context))
    return {"measures": measures, "file": generated} if generated else {"measures": measures}


def _run(profile: Profile, mode: Mode, old: str | None) -> dict:
    """Measure in a throw-away work directory; its logs are kept when a step fails."""
    steps = mode.run_steps
    needs_toolchain = any(step.toolchain for step in steps)
    standin_registry, toolchain_started = toolchain() if needs_toolchain else ("", False)
    work = Path(tempfile.mkdtemp(prefix="bake-bench-"))
    logs = work / "logs"
    logs.mkdir()
    log(f"profile {profile.name}; work directory {work}")
    try:
        found = _measure(Context(profile, work, logs, standin_registry, old), steps)
    except BaseException:
        for entry in work.iterdir():  # the generated file and engine data are large; the logs explain
            if entry == logs:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        log(f"failed; logs kept in {logs}")
        raise
    else:
        shutil.rmtree(work)
    finally:
        if toolchain_started and os.environ.get("BAKE_KEEP_TOOLCHAIN") != "1":
            subprocess.run([str(REPO / "scripts/toolchain.sh"), "down"], check=False)
    return found


def _parser() -> argparse.ArgumentParser:
    """The command line: the profile and outputs, and the modes, of which a run takes one at most."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=f"without a mode: {FULL_RUN.help}. The measures:\n"
        + "\n".join(f"{m.number:>3}. {m.name}: {m.what}" for m in MEASURES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="small file and fewer runs (about two minutes)")
    parser.add_argument("--json", type=Path, default=REPO / ".work/bench.json", help="write the results here")
    parser.add_argument("--plot", type=Path, help=f"draw measure 9 here (the full profile: {PLOT})")
    modes = parser.add_mutually_exclusive_group()
    for mode in MODES:
        modes.add_argument(f"--{mode.flag}", help=mode.help, **mode.option)
    return parser


def _write(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    chosen = ((mode, getattr(args, mode.flag.replace("-", "_"))) for mode in MODES)
    mode, value = next(((m, v) for m, v in chosen if v not in (None, False)), (FULL_RUN, None))
    profile = SMOKE if args.smoke else FULL
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so every daemon is stopped
    for var in PROXY_VARS:  # loopback only: no client may route through a proxy
        os.environ.pop(var, None)
        os.environ.pop(var.upper(), None)
    t0 = time.perf_counter()
    found = _run(profile, mode, value if isinstance(value, str) else None)
    if mode.table:  # a mode of its own table: its one step's figures, at the JSON's top
        (figures,) = found["measures"].values()
        named = {"profile": profile.name} if mode.profiled else {}
        _write(args.json, {**named, "machine": machine(), **figures})
        print(mode.table(figures))
        return 0
    command = (
        "scripts/bench.py" + (" --smoke" if args.smoke else "") + (f" --{mode.flag}" if mode.flag else "")
    )
    report = {"profile": profile.name, "command": command, "machine": machine(), **found}
    report["seconds"] = time.perf_counter() - t0
    report["targets"] = verdicts(report["measures"])
    drawn = not args.smoke and any(m.number == 9 for m in mode.measures)
    plotted = publish(report, args.json, args.plot or (PLOT if drawn else None), draw)
    return 0 if plotted or not args.plot else 1  # a plot asked for by name is part of the result

"""Benchmark bake side by side with its peers, and the reuse of its asset layer.

    scripts/bench.py [--smoke] [--scale | --layers | --pull | --copied | --hub-units | --signing
        | --round-trips [OLD] | --compare OLD] [--plot PNG] [--json OUT]
        (as root; default OUT .work/bench.json)

One run measures, and prints as a table:
  1. cold fetch: a generated file from a loopback mirror throttled per connection,
     fetched by bake (8 connections, then its default), by a copy of s3tokenizer's
     own download loop (one urllib stream, 8 KiB reads, hash after) and by aria2c
     (8 connections), against the physical limit (connections x rate);
  2. interrupted transfer: the mirror cuts every connection once at 50 %; bytes
     the server sent / file size, for bake and for the baseline re-run from zero;
  3. verification overhead: bake / aria2c without a checksum, equal connections;
  4. warm rebuild, 5. base bump, 6. fresh builder: image builds in a second,
     throw-away dockerd (own data root, exec root, pid file and unix socket)
     pushing to a throw-away registry; mirror bytes, registry uploads, wall time;
  7. entrypoint: median of `bake-entrypoint true` against `true` (two files, served and unset);
  8. an agent's pull of the stand-in's ci_base, twice (bench/fleet.py);
  9. scale: job start at 10, 1,000 and 10,000 files (fresh, empty, served; node storage; a Hub
     repository), beside `cp -rs` of the same tree, and `bake manifest digest` and `bake seal` at
     10,000 Hub files, and `bake harvest` of 10,000 cached Hub files, 1 in 100 damaged; drawn as
     docs/performance-scale.png (matplotlib: the [bench] extra);
 10. runner line: `bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"` where
     vLLM's native runner calls it (fresh TMPDIR and XDG_CACHE_HOME, an HF_HOME an earlier job
     seeded), at 3, 9 and 27 locations (bench/runner_line.py).
 11. cold pull: one asset unit of random bytes (twice the profile's file) pushed stored (as bake
     publishes weights), zstd and gzip; an empty engine pulls each, classic and containerd store, and
     the containerd store's daemon alone (ctr), each blob in turn, against the floor: curl of the blob
     through sha256sum and tar -x, and the raw bytes' floor (bench/layers.py; --pull runs it alone);
 12. changes: the vLLM stand-in with three units, its ci_base's stand-in source builds 60 s of CPU;
     add a small asset, bump a unit, change the requirements: the builder's wall time and re-run
     steps (BuildKit's rawjson), and the bytes an agent pulls (the registry's log), classic and
     containerd store, with the block after the slow steps and first (bench/changes.py);
 14. Hub units: what one more layer costs an agent's pull against the bytes that cost as much (how the
     Hub file threshold was chosen); a config-only bump of a loopback Hub repository (a weights file and
     small files) published, pinned and built, and the bytes an agent pulls for it, classic and
     containerd store; one file in two repositories: what the registry stores and an agent pulls
     (bench/hubunits.py; --hub-units runs it alone);
 15. first seeding: twice the profile's file (1 GiB) copied into node storage by bake-entrypoint
     (bake seed), beside its floor on the same disk: cp, then sha256sum of the copy (bench/seeding.py).
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

from bake.manifest import manifest_digest, parse_manifest
from bench.builds import bench_builds
from bench.changes import bench_changes
from bench.common import (
    BENCH_MANIFEST,
    CHECKPOINT_MIRROR_PATH,
    FULL,
    MIB,
    PROXY_VARS,
    REPO,
    SMOKE,
    Profile,
    log,
)
from bench.compare import bench_compare, compare_table
from bench.copied import bench_copied_units, copied_table
from bench.entrypoint import bench_entrypoint
from bench.fetchers import Fetcher, bench_fetch
from bench.files import bench_manifest, generate, snapshot
from bench.hubunits import bench_hub_units
from bench.layers import bench_cold_pull
from bench.plot import draw
from bench.report import machine, publish, verdicts
from bench.round_trips import bench_round_trips, round_trips_table
from bench.runner_line import bench_runner_line
from bench.scale import bench_scale
from bench.seeding import bench_seeding
from bench.signing import bench_signing, signing_table

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


def _measure(
    profile: Profile,
    work: Path,
    logs: Path,
    standin_registry: str,
    scale_only: bool,
    compare: str | None,
    layers_only: str = "",
) -> dict:
    """Run the measures in ``work``: every one, 7, 9 and 10 alone (``scale_only``), 11 and 12 alone
    (``layers_only`` "layers"), 11 alone ("pull"), 14 alone ("hub-units"), or the comparison with commit
    ``compare``. Returns
    them, and the generated file when there is one."""
    if compare:
        return {"measures": {"compare": bench_compare(profile, compare, work, logs)}}
    if layers_only == "copied":
        return {"measures": {"copied": bench_copied_units(work / "copied", logs, standin_registry)}}
    if layers_only == "signing":
        src = snapshot(work / "src", bench_manifest("0" * 64, 0))
        return {
            "measures": {"signing": bench_signing(profile, work / "signing", logs, standin_registry, src)}
        }
    if layers_only == "pull":
        return {"measures": {"cold_pull": bench_cold_pull(profile, work / "cold-pull", logs)}}
    if layers_only == "hub-units":
        src = snapshot(work / "src", bench_manifest("0" * 64, 0))
        found = bench_hub_units(profile, src, work / "hub-units", logs, standin_registry)
        return {"measures": {"hub_units": found}}
    if layers_only:
        src = snapshot(work / "src", bench_manifest("0" * 64, 0))
        measures = {"cold_pull": bench_cold_pull(profile, work / "cold-pull", logs)}
        measures["changes"] = bench_changes(profile, src, work / "changes", logs, standin_registry)
        return {"measures": measures}
    if scale_only:  # no asset to fetch or build: the checkout as it is
        src = snapshot(work / "src", bench_manifest("0" * 64, 0))
        measures = {
            "entrypoint": bench_entrypoint(profile, src, work),
            "scale": bench_scale(profile, src, work),
            "runner_line": bench_runner_line(profile, src, work),
            "seeding": bench_seeding(profile, src, work),
        }
        return {"measures": measures}
    root = work / "mirror"
    log(f"generating {profile.size / MIB:.0f} MiB")
    sha256 = generate(root / CHECKPOINT_MIRROR_PATH, profile.size)
    text = bench_manifest(sha256, profile.size)
    digest = manifest_digest(parse_manifest(text))
    src = snapshot(work / "src", text)
    fetcher = Fetcher(src, work, logs, src / BENCH_MANIFEST, sha256, profile.size)
    measures = bench_fetch(profile, fetcher, root, logs)
    measures.update(bench_builds(profile, src, root, work, logs, digest, standin_registry))
    measures["entrypoint"] = bench_entrypoint(profile, src, work)
    measures["scale"] = bench_scale(profile, src, work)
    measures["runner_line"] = bench_runner_line(profile, src, work)
    measures["seeding"] = bench_seeding(profile, src, work)
    measures["cold_pull"] = bench_cold_pull(profile, work / "cold-pull", logs)
    measures["changes"] = bench_changes(profile, src, work / "changes", logs, standin_registry)
    measures["hub_units"] = bench_hub_units(profile, src, work / "hub-units", logs, standin_registry)
    return {
        "measures": measures,
        "file": {"size_bytes": profile.size, "sha256": sha256, "manifest_digest": digest},
    }


def _run(profile: Profile, scale_only: bool, compare: str | None = None, layers_only: str = "") -> dict:
    """Measure in a throw-away work directory; its logs are kept when a step fails."""
    standin_registry, toolchain_started = ("", False) if scale_only or compare else toolchain()
    work = Path(tempfile.mkdtemp(prefix="bake-bench-"))
    logs = work / "logs"
    logs.mkdir()
    log(f"profile {profile.name}; work directory {work}")
    try:
        found = _measure(profile, work, logs, standin_registry, scale_only, compare, layers_only)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small file and fewer runs (about two minutes)")
    parser.add_argument("--json", type=Path, default=REPO / ".work/bench.json", help="write the results here")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="measures 7, 9, 10 and 15 only (the entrypoint, at scale, the runner's line, a first seeding)",
    )
    parser.add_argument(
        "--compare",
        metavar="OLD",
        help="measures 1, 7, 10 (2 files) and 9 (its most files) on commit OLD and this checkout, in turn",
    )
    parser.add_argument(
        "--layers",
        action="store_true",
        help="measures 11 and 12 only (a cold pull of one unit three ways; each change's builder and pulls)",
    )
    parser.add_argument(
        "--pull", action="store_true", help="measure 11 only (a cold pull of one unit three ways)"
    )
    parser.add_argument(
        "--copied",
        action="store_true",
        help="which blob a unit's layer has in an image that uses it, per Dockerfile shape, push and store",
    )
    parser.add_argument(
        "--hub-units",
        action="store_true",
        help="measure 14 only (a layer's cost; a config-only bump of a Hub repository; a file in two)",
    )
    parser.add_argument(
        "--signing",
        action="store_true",
        help="what `publish --sign` and `pin --verify-key` add, for a three-unit manifest",
    )
    parser.add_argument(
        "--round-trips",
        nargs="?",
        const="",
        metavar="OLD",
        help="measure 13 only: registry requests and round trips of publish and pin; OLD: that commit's too",
    )
    parser.add_argument("--plot", type=Path, help=f"draw measure 9 here (the full profile: {PLOT})")
    args = parser.parse_args(argv)
    profile = SMOKE if args.smoke else FULL
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so every daemon is stopped
    for var in PROXY_VARS:  # loopback only: no client may route through a proxy
        os.environ.pop(var, None)
        os.environ.pop(var.upper(), None)
    t0 = time.perf_counter()
    if args.compare:
        found = _run(profile, False, args.compare)["measures"]["compare"]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"profile": profile.name, "machine": machine(), **found}, indent=2) + "\n"
        )
        print(compare_table(found))
        return 0
    if args.signing:
        found = _run(profile, False, layers_only="signing")["measures"]["signing"]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"profile": profile.name, "machine": machine(), **found}, indent=2) + "\n"
        )
        print(signing_table(found))
        return 0
    if args.round_trips is not None:
        work = Path(tempfile.mkdtemp(prefix="bake-bench-"))
        (work / "logs").mkdir()
        found = bench_round_trips(work, work / "logs", args.round_trips or None)
        shutil.rmtree(work)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), **found}, indent=2) + "\n")
        print(round_trips_table(found))
        return 0
    alone = {"pull": args.pull, "layers": args.layers, "hub-units": args.hub_units}
    layers_only = next((name for name, on in alone.items() if on), "")
    if args.copied:
        found = _run(profile, False, layers_only="copied")["measures"]["copied"]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), **found}, indent=2) + "\n")
        print(copied_table(found))
        return 0
    found = _run(profile, args.scale, layers_only=layers_only)
    command = "scripts/bench.py" + (" --smoke" if args.smoke else "") + (" --scale" if args.scale else "")
    command += f" --{layers_only}" if layers_only else ""
    report = {"profile": profile.name, "command": command, "machine": machine(), **found}
    report["seconds"] = time.perf_counter() - t0
    report["targets"] = verdicts(report["measures"])
    plotted = publish(report, args.json, args.plot or (None if args.smoke or layers_only else PLOT), draw)
    return 0 if plotted or not args.plot else 1  # a plot asked for by name is part of the result

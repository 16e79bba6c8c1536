"""The bench's one registry of measures: each one's number, name, what it measures, the step (function)
that measures it and whether that needs the Docker toolchain, its target, and its verdict's row.

It feeds the command line (scripts/bench/main.py: the modes, an exclusive group, and --help's list),
the verdicts (scripts/bench/report.py), tests/test_bench.py, and the table in docs/performance.md,
which tests/test_bench_report.py checks against it (number, name, target).

A step may measure several measures that share its setup (the fetches 1-3; the builds 4-6 and 8). A
run takes its steps in ``STEPS`` order, whatever the numbers: the order the bench has always measured in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bake import layers
from bake.manifest import manifest_digest, parse_manifest
from bench import rows, runner_line, seeding
from bench.builds import bench_builds
from bench.changes import bench_changes
from bench.common import BENCH_MANIFEST, CHECKPOINT_MIRROR_PATH, MIB, Profile, log
from bench.compare import bench_compare, compare_table
from bench.copied import bench_copied_units, copied_table
from bench.entrypoint import bench_entrypoint
from bench.fetchers import Fetcher, bench_fetch
from bench.files import bench_manifest, generate, snapshot
from bench.hubunits import bench_hub_units, hub_units_row
from bench.layers import bench_cold_pull
from bench.round_trips import bench_round_trips, round_trips_table
from bench.runner_line import bench_runner_line
from bench.scale import bench_scale
from bench.seeding import bench_seeding
from bench.signing import bench_signing, signing_table


@dataclass
class Context:
    """What a step measures with: the run's profile and directories, and the tree it measures."""

    profile: Profile
    work: Path
    logs: Path
    standin_registry: str = ""  # the toolchain's registry of stand-in bases, when a step needs it
    old: str | None = None  # the commit --compare and --round-trips measure beside this checkout
    src: Path | None = None  # the snapshot of this checkout, when a step needs it
    mirror_root: Path | None = None  # the generated file's mirror root, when a step needs it
    sha256: str = ""
    digest: str = ""  # the manifest digest of the generated file's manifest

    def fetcher(self) -> Fetcher:
        return Fetcher(
            self.src, self.work, self.logs, self.src / BENCH_MANIFEST, self.sha256, self.profile.size
        )


@dataclass(frozen=True)
class Step:
    """A function that measures, and what it needs. Its figures go under ``key`` in the JSON's
    ``measures``; a step without one returns its measures' keys itself."""

    key: str
    run: Callable[[Context], dict]
    toolchain: bool = False  # needs scripts/toolchain.sh's engine, registry and stand-ins
    needs: str = ""  # "tree": a snapshot of this checkout; "file": the generated file, and its manifest's

    def measure(self, context: Context) -> dict:
        found = self.run(context)
        return {self.key: found} if self.key else found


def prepare(context: Context, steps: tuple[Step, ...]) -> dict:
    """Give ``context`` the tree and file ``steps`` need, before any measuring; return the file's figures.

    The snapshot is taken first, so edits made while the bench runs cannot reach what it measures.
    """
    needs = {step.needs for step in steps}
    if "file" in needs:
        context.mirror_root = context.work / "mirror"
        log(f"generating {context.profile.size / MIB:.0f} MiB")
        context.sha256 = generate(context.mirror_root / CHECKPOINT_MIRROR_PATH, context.profile.size)
        text = bench_manifest(context.sha256, context.profile.size)
        context.digest = manifest_digest(parse_manifest(text))
        context.src = snapshot(context.work / "src", text)
        return {
            "size_bytes": context.profile.size,
            "sha256": context.sha256,
            "manifest_digest": context.digest,
        }
    if "tree" in needs:  # no asset to fetch or build: the checkout as it is
        context.src = snapshot(context.work / "src", bench_manifest("0" * 64, 0))
    return {}


FETCH = Step("", lambda c: bench_fetch(c.profile, c.fetcher(), c.mirror_root, c.logs), needs="file")
BUILDS = Step(
    "",
    lambda c: bench_builds(c.profile, c.src, c.mirror_root, c.work, c.logs, c.digest, c.standin_registry),
    toolchain=True,
    needs="file",
)
ENTRYPOINT = Step("entrypoint", lambda c: bench_entrypoint(c.profile, c.src, c.work), needs="tree")
SCALE = Step("scale", lambda c: bench_scale(c.profile, c.src, c.work), needs="tree")
RUNNER_LINE = Step("runner_line", lambda c: bench_runner_line(c.profile, c.src, c.work), needs="tree")
SEEDING = Step("seeding", lambda c: bench_seeding(c.profile, c.src, c.work), needs="tree")
# Its engines are the toolchain's dockerd and containerd, started on data roots of their own.
COLD_PULL = Step(
    "cold_pull", lambda c: bench_cold_pull(c.profile, c.work / "cold-pull", c.logs), toolchain=True
)
CHANGES = Step(
    "changes",
    lambda c: bench_changes(c.profile, c.src, c.work / "changes", c.logs, c.standin_registry),
    toolchain=True,
    needs="tree",
)
HUB_UNITS = Step(
    "hub_units",
    lambda c: bench_hub_units(c.profile, c.src, c.work / "hub-units", c.logs, c.standin_registry),
    toolchain=True,
    needs="tree",
)
ROUND_TRIPS = Step("round_trips", lambda c: bench_round_trips(c.work, c.logs, c.old or None))
COMPARE = Step("compare", lambda c: bench_compare(c.profile, c.old, c.work, c.logs))
COPIED = Step(
    "copied", lambda c: bench_copied_units(c.work / "copied", c.logs, c.standin_registry), toolchain=True
)
SIGNING = Step(
    "signing",
    lambda c: bench_signing(c.profile, c.work / "signing", c.logs, c.standin_registry, c.src),
    toolchain=True,
    needs="tree",
)
# The order a run takes its steps in: the file's measures first, then the tree's, the pulls last.
STEPS = (FETCH, BUILDS, ENTRYPOINT, SCALE, RUNNER_LINE, SEEDING, COLD_PULL, CHANGES, HUB_UNITS, ROUND_TRIPS)


@dataclass(frozen=True)
class Measure:
    """One measure: its identity, the step that measures it, its target and its verdict."""

    number: int
    name: str
    what: str  # one line of --help
    step: Step
    key: str  # where its figures are in the JSON's ``measures``
    target: str
    row: Callable[[dict], tuple[str, bool]] | None  # (result, met); None: its mode prints its own table
    modes: tuple[str, ...] = ("full",)  # the runs that measure it: the full run, and modes by their flag

    @property
    def toolchain(self) -> bool:
        return self.step.toolchain


MEASURES = (
    Measure(
        1,
        "cold fetch",
        "a generated file from a loopback mirror throttled per connection, fetched by bake (8 connections, "
        "then its default), by a copy of s3tokenizer's own loop and by aria2c, against connections x rate",
        FETCH,
        "cold_fetch",
        ">= 6x baseline, >= 0.95x aria2c",
        rows.cold_fetch,
    ),
    Measure(
        2,
        "interrupted transfer",
        "the mirror cuts every connection once at 50 %: bytes sent / file size, bake and the baseline",
        FETCH,
        "interrupted",
        "<= 1.1",
        rows.interrupted,
    ),
    Measure(
        3,
        "verification overhead",
        "bake / aria2c without a checksum, equal connections",
        FETCH,
        "verify_overhead",
        "<= 1.10",
        rows.verify_overhead,
    ),
    Measure(
        4,
        "warm rebuild",
        "the image built again in the bench's own dockerd: asset bytes from the mirror",
        BUILDS,
        "warm_rebuild",
        "0 asset bytes",
        rows.warm_rebuild,
    ),
    Measure(
        5,
        "base bump",
        "the image built on another base and pushed: asset-layer bytes uploaded",
        BUILDS,
        "base_bump",
        "0 asset bytes",
        rows.base_bump,
    ),
    Measure(
        6,
        "fresh builder",
        "the engine's data wiped, the registry kept: asset bytes from the origin; the vLLM stand-in's "
        "ci_base",
        BUILDS,
        "fresh_builder",
        "0 asset bytes",
        rows.fresh_builder,
    ),
    Measure(
        7,
        "entrypoint",
        "median of `bake-entrypoint true` against `true` (two files, served and unset)",
        ENTRYPOINT,
        "entrypoint",
        "<= 5 ms served",
        rows.entrypoint,
        ("full", "scale"),
    ),
    Measure(
        8,
        "agent pull",
        "an empty engine pulls the stand-in's ci_base v1, then v2, per image store (bench/fleet.py)",
        BUILDS,
        "fresh_builder",
        "0 asset bytes on the containerd store",
        rows.agent_pull,
    ),
    Measure(
        9,
        "scale",
        "job start at 10, 1,000 and 10,000 files beside `cp -rs`; digest, seal and harvest at 10,000 Hub "
        "files; drawn as docs/performance-scale.png",
        SCALE,
        "scale",
        "fresh, empty <= 100 ms or 1.5x cp -rs; served <= 20 ms; 10x files <= 12x; digest, seal <= 2 s; "
        "harvest <= 5 s, every bad file named",
        rows.scale,
        ("full", "scale"),
    ),
    Measure(
        10,
        "runner line",
        '`bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"` in a fresh job, at 3, 9 and '
        "27 locations",
        RUNNER_LINE,
        "runner_line",
        f"<= {runner_line.TARGET_MS} ms at 2 files; linear in locations",
        runner_line.runner_line_row,
        ("full", "scale"),
    ),
    Measure(
        11,
        "cold pull",
        "one unit of random bytes stored, zstd and gzip: an empty engine pulls each, per store, against "
        "curl | sha256sum | tar -x",
        COLD_PULL,
        "cold_pull",
        "bake's layer >= 0.9 of the floor",
        rows.cold_pull,
        ("full", "layers", "pull"),
    ),
    Measure(
        12,
        "changes",
        "the vLLM stand-in, three units: add an asset, bump a unit, change the requirements; the builder's "
        "re-run steps and the bytes an agent pulls",
        CHANGES,
        "changes",
        "after the slow steps: a manifest change re-runs no slow step and a containerd agent pulls "
        "<= 1.05x the changed unit and index; a requirements change pulls 0 asset bytes",
        rows.changes,
        ("full", "layers"),
    ),
    Measure(
        13,
        "registry round trips",
        "the requests and round trips of `bake publish` and `bake pin` per unit, each request delayed by a "
        "proxy; with OLD, that commit's too",
        ROUND_TRIPS,
        "round_trips",
        "<= 4 sequential round trips a unit, units at once",
        None,
        ("round-trips",),
    ),
    Measure(
        14,
        "Hub units",
        "what one more layer costs a pull; a config-only bump of a Hub repository; one file in two "
        "repositories; a repository of 200 files",
        HUB_UNITS,
        "hub_units",
        "a containerd agent pulls <= 1.05x the changed files' units and index for a bump; a file in two "
        "repositories is one unit, pulled once (<= 1.05x); 200 files fit the budget "
        f"({layers.LAYER_BUDGET} layers) and run on both stores",
        hub_units_row,
        ("full", "hub-units"),
    ),
    Measure(
        15,
        "first seeding",
        "twice the profile's file copied into node storage by bake-entrypoint (bake seed), beside cp, then "
        "sha256sum of the copy",
        SEEDING,
        "seeding",
        f"<= {seeding.TARGET}x the floor",
        seeding.seeding_row,
        ("full", "scale"),
    ),
)


@dataclass(frozen=True)
class Mode:
    """A run: the full one, or a flag of the command line's exclusive group."""

    flag: str  # "" for the full run
    help: str
    steps: tuple[Step, ...] = ()  # () for a run of verdicts: the steps of the measures that name its flag
    table: Callable[[dict], str] | None = None  # a run of its own table, of its one step's figures
    profiled: bool = True  # whether its JSON names the profile
    option: dict = field(default_factory=lambda: {"action": "store_true"})  # argparse's, beyond help

    @property
    def measures(self) -> tuple[Measure, ...]:
        return tuple(m for m in MEASURES if (self.flag or "full") in m.modes)

    @property
    def run_steps(self) -> tuple[Step, ...]:
        """Its steps, in the order a run takes them."""
        if self.steps:
            return self.steps
        mine = {m.step for m in self.measures}
        return tuple(step for step in STEPS if step in mine)


def _only(flag: str) -> str:
    """A mode's help: the numbers and names of the measures that name its flag."""
    chosen = [m for m in MEASURES if flag in m.modes]
    numbers = [str(m.number) for m in chosen]
    said = " and ".join([", ".join(numbers[:-1]), numbers[-1]] if len(numbers) > 1 else numbers)
    plural = "s" if len(numbers) > 1 else ""
    return f"measure{plural} {said} only: " + ", ".join(m.name for m in chosen)


FULL_RUN = Mode("", "every measure but 13")
MODES = (
    Mode("scale", _only("scale")),
    Mode("layers", _only("layers")),
    Mode("pull", _only("pull")),
    Mode("hub-units", _only("hub-units")),
    Mode(
        "round-trips",
        _only("round-trips") + "; with OLD, that commit's bake too, side by side",
        (ROUND_TRIPS,),
        round_trips_table,
        profiled=False,
        option={"nargs": "?", "const": "", "metavar": "OLD"},
    ),
    Mode(
        "compare",
        "measures 1, 7, 10 (2 files) and 9 (its most files) on commit OLD and this checkout, in turn",
        (COMPARE,),
        lambda result: compare_table(result, {m.number: m.name for m in MEASURES}),
        option={"metavar": "OLD"},
    ),
    Mode(
        "copied",
        "which blob a unit's layer has in an image that uses it, per Dockerfile shape, push and store",
        (COPIED,),
        copied_table,
        profiled=False,
    ),
    Mode(
        "signing",
        "what `publish --sign` and `pin --verify-key` add, for a three-unit manifest",
        (SIGNING,),
        signing_table,
    ),
)

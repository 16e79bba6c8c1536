"""Measure 15: a first seeding of a large file into node storage, side by side with its floor.

The floor is what any seeding must do on the same disk: read the baked file, write it, and prove
the copy: ``cp`` of it, then ``sha256sum`` of the copy. bake seeds through the entrypoint
(``bake-entrypoint true``, the consumer's location a directory that holds data: node storage),
which runs ``bake seed``: one pass that reads, hashes and writes, then one ``fsync``. Medians of
three rounds, floor and bake in turn, each into a fresh directory beside the other's; the disk is
synced before each run, so that neither inherits the other's dirty pages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import MIB, Profile, log
from bench.entrypoint import seal_files

ROUNDS = 3
TARGET = 1.15
NAME = "bench/weights.bin"
CONSUMER = '[[consumer]]\nname = "bench"\nlocations = ["${BENCH_CACHE:-$HOME/.cache}/bench"]\n'


def _weights(path: Path, size: int) -> None:
    """``size`` bytes that compress to nothing, written in 8 MiB blocks."""
    block = os.urandom(8 * MIB)
    with path.open("wb") as out:
        for _ in range(size // len(block)):
            out.write(block)
        out.write(block[: size % len(block)])


def _timed(argv: list[str], **kwargs: object) -> float:
    os.sync()
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - t0


def bench_seeding(profile: Profile, src: Path, work: Path) -> dict:
    """Measure 15 (1 GiB in the full profile: twice its file). Returns the medians and their ratio."""
    root = work / "seeding"
    (root / "sources").mkdir(parents=True)
    size = 2 * profile.size
    log(f"seeding: {size / MIB:.0f} MiB into node storage, beside cp + sha256sum")
    data = root / "weights.bin"
    _weights(data, size)
    assets = seal_files(src, root, {}, work / "logs" / "seeding.log", CONSUMER + _asset(data, size))
    data.unlink()
    baked = assets / NAME
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root / "home"),
        "TMPDIR": str(root / "tmp"),
        "BAKE_ASSETS": str(assets),
        "BAKE_QUIET": "1",
        "BAKE_REQUIRE": "1",
    }
    (root / "tmp").mkdir()
    cp, sums, bake = [], [], []
    for i in range(ROUNDS):
        floor = root / f"floor-{i}"
        floor.mkdir()
        cp.append(_timed(["cp", str(baked), str(floor / "weights.bin")]))
        sums.append(_timed(["sha256sum", str(floor / "weights.bin")]))
        shutil.rmtree(floor)
        node = root / f"node-{i}"
        (node / "bench").mkdir(parents=True)
        (node / "bench" / "someone else's.bin").write_bytes(b"node data")  # node storage: holds data
        entrypoint = ["/bin/sh", str(src / "scripts/entrypoint.sh"), "true"]
        bake.append(_timed(entrypoint, env={**env, "BENCH_CACHE": str(node)}, cwd=root))
        copy = node / "bench" / "weights.bin"
        if copy.is_symlink() or copy.stat().st_size != size:
            raise AssertionError(f"{copy}: expected a verified copy of {size} bytes")
        shutil.rmtree(node)
    floors = [a + b for a, b in zip(cp, sums, strict=True)]
    result = {
        "size_bytes": size,
        "rounds": ROUNDS,
        "cp_seconds": statistics.median(cp),
        "sha256sum_seconds": statistics.median(sums),
        "floor_seconds": statistics.median(floors),
        "bake_seconds": statistics.median(bake),
        "runs": {"cp": cp, "sha256sum": sums, "bake": bake},
    }
    result["ratio"] = result["bake_seconds"] / result["floor_seconds"]
    log(
        f"seeding: bake {result['bake_seconds']:.2f} s, floor {result['floor_seconds']:.2f} s "
        f"(cp {result['cp_seconds']:.2f} s + sha256sum {result['sha256sum_seconds']:.2f} s): "
        f"{result['ratio']:.2f}x"
    )
    return result


def _asset(path: Path, size: int) -> str:
    """The manifest entry of the file at ``path``, fetched from it (file://)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(8 * MIB):
            digest.update(block)
    return (
        f'[[asset]]\nname = "weights"\npath = "{NAME}"\nsha256 = "{digest.hexdigest()}"\n'
        f'size = {size}\nurls = ["{path.as_uri()}"]\n'
    )


def seeding_row(m: dict) -> tuple[str, bool]:
    """Row 15 of the verdicts."""
    s = m["seeding"]
    return (
        f"{s['size_bytes'] / MIB:.0f} MiB into node storage through bake-entrypoint (bake seed), median "
        f"of {s['rounds']}: {s['bake_seconds']:.2f} s, against the floor on the same disk "
        f"{s['floor_seconds']:.2f} s (cp {s['cp_seconds']:.2f} s + sha256sum of the copy "
        f"{s['sha256sum_seconds']:.2f} s): {s['ratio']:.2f}x",
        s["ratio"] <= TARGET,
    )

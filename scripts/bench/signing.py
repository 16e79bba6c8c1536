"""What signing adds to `bake publish` and `bake pin` (`scripts/bench.py --signing`).

A manifest of three units of random bytes, served by the loopback mirror, is published on the
bench's own engine to its own registry, once to warm the builder. Then, in each round, into fresh
repositories: `bake publish` plain and `bake publish --sign KEY` (a cosign key pair made here;
no transparency log, which these machines cannot reach), in alternating order; each published
again (everything there: the check alone); and `bake pin` plain and `bake pin --verify-key`. The
figures are wall times of the whole command, medians over the rounds, and signed minus plain.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import MIB, Profile, log
from bench.engine import Engine, Registry
from bench.fleet import HOST_NETWORK
from bench.processes import free_port, mirror, run

UNITS = 3
STEPS = ("publish", "publish again", "pin")


def _sizes(profile: Profile) -> tuple[int, int]:
    """(bytes per unit, rounds)."""
    return (32 * MIB, 7) if profile.name == "full" else (MIB, 2)


def _manifest(files: Path, url: str, size: int) -> str:
    entries = []
    for i in range(UNITS):
        path = files / f"u{i}.bin"
        with path.open("wb") as f:
            for left in range(size, 0, -4 * MIB):
                f.write(os.urandom(min(4 * MIB, left)))
        digest = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
        entries.append(
            f'[[asset]]\nname = "u{i}"\npath = "data/u{i}.bin"\nsha256 = "{digest[:64]}"\n'
            f'size = {size}\nurls = ["{url}/{path.name}"]\n'
        )
    return "\n".join(entries)


class Site:
    """The manifest, the key pair and the bench engine's environment, publishing and pinning."""

    def __init__(self, work: Path, logs: Path, engine: Engine, registry: Registry, src: Path) -> None:
        self.root, self.logs, self.registry = work / "site", logs, registry
        self.root.mkdir()
        self.env = {
            **engine.env,
            "PYTHONPATH": str(src),
            "FETCH_IMAGE": "local/rocm-standin:bookworm",
            "COSIGN_PASSWORD": "",
        }
        subprocess.run(
            ["cosign", "generate-key-pair", "--output-key-prefix", "bench"],
            cwd=self.root, env=self.env, capture_output=True, check=True, timeout=60,
        )  # fmt: skip

    def bake(self, phase: str, *args: str) -> float:
        return run([sys.executable, "-m", "bake", *args], log_path=self.logs / f"signing-{phase}.log",
                   cwd=self.root, env=self.env)  # fmt: skip

    def publish(self, repository: str, signed: bool) -> float:
        sign = ["--sign", "bench.key", "--no-tlog"] if signed else []
        args = ["--manifest", "assets.toml", "--repository", f"{self.registry.host}/{repository}"]
        return self.bake(f"publish-{repository}", "publish", *args, *sign, *HOST_NETWORK)

    def pin(self, repository: str, signed: bool) -> float:
        dockerfile = self.root / f"Dockerfile.{repository}"
        ref = f"{self.registry.host}/{repository}"
        dockerfile.write_text(f"FROM scratch\nCOPY --link --from={ref} / /\n")
        verify = ["--verify-key", "bench.pub", "--no-tlog"] if signed else []
        args = ["--manifest", "assets.toml", "--repository", ref, *verify, dockerfile.name]
        return self.bake(f"pin-{repository}", "pin", *args)


def _round(site: Site, i: int) -> dict[str, dict[str, float]]:
    """One round into fresh repositories: each step plain and signed, the first to run alternating."""
    times: dict[str, dict[str, float]] = {"plain": {}, "signed": {}}
    order = ("plain", "signed") if i % 2 == 0 else ("signed", "plain")
    for kind in order:
        times[kind]["publish"] = site.publish(f"{kind}-{i}", kind == "signed")
    for kind in order:
        times[kind]["publish again"] = site.publish(f"{kind}-{i}", kind == "signed")
    for kind in order:
        times[kind]["pin"] = site.pin(f"{kind}-{i}", kind == "signed")
    log(f"  signing round {i + 1}: " + ", ".join(f"{k} {v['publish']:.2f} s" for k, v in times.items()))
    return times


def bench_signing(profile: Profile, work: Path, logs: Path, standin_registry: str, src: Path) -> dict:
    """Publish and pin a three-unit manifest plain and signed (see the module); the medians."""
    size, rounds = _sizes(profile)
    files = work / "files"
    files.mkdir(parents=True)
    engine = Engine(work / "builder", logs, namespace="bake-bench-signing")
    registry = Registry(work, logs)
    registry.start()
    engine.start()
    try:
        engine.client.images.pull(f"{standin_registry}/rocm-standin:bookworm").tag(
            "local/rocm-standin:bookworm"
        )
        site = Site(work, logs, engine, registry, src)
        with mirror(src, files, logs, port=free_port()) as served:
            (site.root / "assets.toml").write_text(_manifest(files, served.url, size))
            warm = site.publish("warm", False)
            found = [_round(site, i) for i in range(rounds)]
    finally:
        engine.stop()
        registry.stop()
    medians = {
        kind: {step: statistics.median(r[kind][step] for r in found) for step in STEPS}
        for kind in ("plain", "signed")
    }
    return {
        "units": UNITS,
        "unit_bytes": size,
        "rounds": rounds,
        "warm_publish_seconds": warm,
        "runs": found,
        "median_seconds": medians,
        "added_seconds": {step: medians["signed"][step] - medians["plain"][step] for step in STEPS},
    }


def signing_table(found: dict) -> str:
    """The medians as a table: each step plain, signed, and what signing adds."""
    lines = [
        f"signing: {found['units']} units of {found['unit_bytes'] // MIB} MiB, "
        f"median of {found['rounds']} rounds",
        f"{'step':<16}{'plain s':>10}{'signed s':>10}{'added s':>10}",
    ]
    for step in STEPS:
        plain, signed = (found["median_seconds"][kind][step] for kind in ("plain", "signed"))
        lines.append(f"{step:<16}{plain:>10.2f}{signed:>10.2f}{signed - plain:>10.2f}")
    return "\n".join(lines)

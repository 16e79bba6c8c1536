"""Measure 12: what each change costs vLLM's builder and an agent, with the block in two places.

On the vLLM stand-in (docker/examples/vllm), its manifest three units of random bytes and ci_base's
stand-in source builds HEAVY_SECONDS of CPU work: build ci_base v0, then one change at a time,
each published, pinned and built as CI would (`bake publish`, `bake pin`, the plain bake file's
`ci-base-rocm` pushed to a throw-away registry):
  add a small asset; bump one of the three units; change the requirements.
The builder's figures are its wall time and the ci_base steps it ran again, read from BuildKit's
own record (`--progress=rawjson`: a step is re-run when its vertex is not `cached`). Then an empty
engine per image store (classic, containerd) pulls v0, then each later version; the bytes it
pulled are the registry's own (its access log: the bytes written for each blob GET). The block
sits after the slow steps (bake's default) or first in ci_base; each place is measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import MIB, VLLM_ROOT, Profile, log
from bench.engine import Engine, Registry, agent_pulls
from bench.fleet import COMMITTED, DOCKERFILE, HOST_NETWORK, layers, manifest_digest
from bench.processes import free_port, mirror, run

PLACES = ("after the slow steps", "first")
CHANGES = ("add a small asset", "bump one of three units", "change the requirements")
HEAVY_STAMP = "/opt/ci-base/source-builds-ran-at"


def _sizes(profile: Profile) -> tuple[int, int, int]:
    """(unit bytes, added asset bytes, CPU seconds of the stand-in source builds)."""
    return (128 * MIB, 4 * MIB, 60) if profile.name == "full" else (4 * MIB, MIB, 2)


def _entry(name: str, path: Path, url: str) -> str:
    digest = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout[:64]
    return (
        f'[[asset]]\nname = "{name}"\npath = "data/{name}.bin"\nsha256 = "{digest}"\n'
        f'size = {path.stat().st_size}\nurls = ["{url}/{path.name}"]\n'
    )


class Site:
    """One copy of the stand-in, its block in one place, building on the bench engine."""

    def __init__(self, src: Path, work: Path, logs: Path, engine: Engine, registry: Registry, place: str):
        self.src, self.logs, self.engine, self.registry = src, logs, engine, registry
        self.root = work / f"site-{PLACES.index(place)}"
        self.prefix = f"{registry.host}/place{PLACES.index(place)}"
        shutil.copytree(src / VLLM_ROOT, self.root, symlinks=True)
        dockerfile = self.root / DOCKERFILE
        text = dockerfile.read_text().replace(COMMITTED, self.prefix)
        if place == "first":  # the block's comment and line move right under the stage's FROM
            lines = text.splitlines(keepends=True)
            at = next(i for i, line in enumerate(lines) if f"--from={self.prefix}/bake-assets" in line)
            block = lines[at - 1 : at + 1]
            del lines[at - 1 : at + 1]
            start = next(i for i, line in enumerate(lines) if line.startswith("FROM mori_base AS ci_base"))
            lines[start + 1 : start + 1] = block
            text = "".join(lines)
        dockerfile.write_text(text)

    def bake(self, phase: str, *args: str, env: dict[str, str]) -> float:
        log_path = self.logs / f"{self.root.name}-{phase}.log"
        return run([sys.executable, "-m", "bake", *args], log_path=log_path, cwd=self.root, env=env)

    def publish_and_pin(self, phase: str, env: dict[str, str]) -> float:
        assets = ["--manifest", "docker/bake-assets.toml", "--repository", f"{self.prefix}/bake-assets"]
        runtime = ["--runtime", "--repository", f"{self.prefix}/bake-runtime"]
        seconds = self.bake(f"{phase}-publish", "publish", *assets, *HOST_NETWORK, env=env)
        self.bake(f"{phase}-publish-runtime", "publish", *runtime, *HOST_NETWORK, env=env)
        self.bake(f"{phase}-pin", "pin", *assets, DOCKERFILE, env=env)
        self.bake(f"{phase}-pin-runtime", "pin", *runtime, DOCKERFILE, env=env)
        return seconds

    def build(self, phase: str, env: dict[str, str]) -> dict:
        """Build and push ci_base as ``phase``; return its ref, wall time and the steps that ran."""
        tag = f"{self.prefix}/ci_base:{phase}"
        cmd = ["docker", "buildx", "bake", "-f", "docker/docker-bake-rocm.hcl", "--progress=rawjson"]
        cmd += ["--set", f"ci-base-rocm.tags={tag}", "--set", "ci-base-rocm.output=type=image,push=true"]
        cmd += ["ci-base-rocm"]
        log_path = self.logs / f"{self.root.name}-{phase}-build.log"
        seconds = run(cmd, log_path=log_path, cwd=self.root, env=env)
        cached: dict[str, bool] = {}
        for line in log_path.read_text().splitlines():
            if line.startswith("{"):
                for vertex in json.loads(line).get("vertexes") or []:
                    name = vertex.get("name", "")
                    if name.startswith("[ci_base "):
                        cached[name] = cached.get(name, False) or bool(vertex.get("cached"))
        name = tag.split("/", 1)[1].rsplit(":", 1)[0]
        digest = manifest_digest(self.registry.host, name, phase)
        rerun = sorted(step.split("] ", 1)[1] for step, hit in cached.items() if not hit)
        heavy = [hit for step, hit in cached.items() if HEAVY_STAMP in step]
        return {
            "ref": f"{tag.rsplit(':', 1)[0]}@{digest}",
            "seconds": seconds,
            # BuildKit's own record: every ci_base step not cached, bake's block and runtime lines apart
            # (a COPY --link on a changed base is a merge, no copy: its layer keeps its blob).
            "steps_rerun": [step[:80] for step in rerun if self.prefix not in step],
            "bake_steps_rerun": len([step for step in rerun if self.prefix in step]),
            "slow_steps_cached": bool(heavy) and all(heavy),
        }


def _apply(change: str, site: Site, files: Path, url: str) -> None:
    manifest = site.root / "docker/bake-assets.toml"
    if change == CHANGES[0]:
        manifest.write_text(manifest.read_text() + "\n" + _entry("small", files / "small.bin", url))
    elif change == CHANGES[1]:
        text = manifest.read_text().split("\n\n")
        text[1] = _entry("w1", files / "w1b.bin", url).rstrip("\n")
        manifest.write_text("\n\n".join(text))
    else:
        requirements = site.root / "requirements/rocm.txt"
        requirements.write_text(requirements.read_text() + "numpy\n")


def _block(held: list[tuple[str, str]], text: str, n: int, prefix: str) -> list[tuple[str, str]]:
    """The block's layers in ci_base: count the layer-making instructions of the stage above it."""
    stage = text.split(" AS ci_base\n", 1)[1].split("\nFROM ", 1)[0].splitlines()
    last = max(i for i, line in enumerate(stage) if f"--from={prefix}/bake-assets" in line)
    above = sum(line.startswith(("RUN", "COPY", "ADD")) for line in stage[last + 1 :])
    return held[len(held) - above - n : len(held) - above]


def _measure_place(place: str, site: Site, files: Path, url: str, env: dict[str, str]) -> list[dict]:
    """v0 and each change, built as CI would; the versions, each with its block's layers and sizes."""
    (site.root / "docker/bake-assets.toml").write_text(
        "\n".join(_entry(f"w{i}", files / f"w{i}.bin", url) for i in range(3))
    )
    versions = []
    for phase, change in [("v0", None), *((f"v{i + 1}", c) for i, c in enumerate(CHANGES))]:
        if change:
            _apply(change, site, files, url)
        t0 = time.perf_counter()
        publish = site.publish_and_pin(phase, env) if change != CHANGES[2] else 0.0
        built = site.build(phase, env)
        built.update(change=change or "first build", publish_seconds=publish, wall=time.perf_counter() - t0)
        text = (site.root / DOCKERFILE).read_text()
        n = sum(f"--from={site.prefix}/bake-assets" in line for line in text.splitlines())
        built["block_layers"] = _block(layers(built["ref"]), text, n, site.prefix)
        built["sizes"] = site.registry.layer_sizes(built["ref"])
        versions.append(built)
        log(
            f"  changes ({place}): {built['change']}: {built['seconds']:.1f} s, ci_base's own steps re-run: "
            f"{built['steps_rerun']}"
        )
    return versions


def bench_changes(profile: Profile, src: Path, work: Path, logs: Path, standin_registry: str) -> dict:
    """Measure 12 (see the module): both places, the builder's figures and both stores' pulls."""
    unit, small, heavy = _sizes(profile)
    files = work / "files"
    files.mkdir(parents=True)
    for name, size in (("w0", unit), ("w1", unit), ("w2", unit), ("w1b", unit), ("small", small)):
        with (files / f"{name}.bin").open("wb") as f:
            for left in range(size, 0, -4 * MIB):
                f.write(os.urandom(min(4 * MIB, left)))
    engine = Engine(work / "builder", logs, namespace="bake-bench-changes")
    registry = Registry(work, logs, level="info")
    registry.start()
    engine.start()
    port = free_port()
    result: dict = {"unit_bytes": unit, "small_bytes": small, "heavy_cpu_seconds": heavy, "places": {}}
    try:
        base = f"{standin_registry}/rocm-standin:bookworm"
        engine.client.images.pull(base).tag("local/rocm-standin:bookworm")
        env = {
            **engine.env,
            "PYTHONPATH": str(src),
            "FETCH_IMAGE": "local/rocm-standin:bookworm",
            "BASE_IMAGE": "local/rocm-standin:bookworm",
            "HEAVY_SECONDS": str(heavy),
        }
        with mirror(src, files, logs, port=port) as served:
            for place in PLACES:
                site = Site(src, work, logs, engine, registry, place)
                versions = _measure_place(place, site, files, served.url, env)
                pulls = agent_pulls(site.registry, work, logs, site.root.name, versions)
                result["places"][place] = {"versions": versions, "pulls": pulls}
        return result
    finally:
        engine.stop()
        registry.stop()

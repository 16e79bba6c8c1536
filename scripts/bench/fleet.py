"""vLLM's flow on the stand-in (docker/examples/vllm), and the pull of an agent that already has ci_base v1.

On the bench engine: ``bake publish`` and ``bake pin`` (the unit images are the ones ``bake build
--assets-image`` published, for the same manifest), the stand-in's wrapper builds ci_base v1, then
v2 after a requirements-only change. On a second, empty engine (an agent), with the classic and
then the containerd image store: pull v1, then v2, and count what each pull downloads of the
asset layers (the block's, after ci_base's slow steps and its requirements).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import BENCH_MANIFEST, MANIFEST_TYPES, VLLM_ROOT, BenchError, log
from bench.engine import Engine, Registry

# The repositories the committed stand-in names; the bench points them at its own registry.
COMMITTED = "127.0.0.1:5000/vllm-standin"
WRAPPER = ".buildkite/scripts/ci-bake-rocm.sh"
DOCKERFILE = "docker/Dockerfile.rocm"
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]


def _registry(url: str, method: str = "GET") -> urllib.request.Request:
    return urllib.request.Request(url, method=method, headers={"Accept": MANIFEST_TYPES})


def manifest_digest(host: str, name: str, tag: str) -> str:
    """The digest the registry serves for ``name:tag``."""
    with urllib.request.urlopen(
        _registry(f"http://{host}/v2/{name}/manifests/{tag}", "HEAD"), timeout=30
    ) as r:
        return r.headers["Docker-Content-Digest"]


def layers(ref: str) -> list[tuple[str, str]]:
    """(diff-ID, blob digest) of each layer of ``ref`` (``host/name[:tag][@digest]``), from the registry."""
    host, _, rest = ref.partition("/")
    name, _, which = rest.partition("@")
    if ":" in name.rsplit("/", 1)[-1]:
        name, _, tag = name.rpartition(":")
        which = which or tag
    with urllib.request.urlopen(_registry(f"http://{host}/v2/{name}/manifests/{which}"), timeout=30) as r:
        manifest = json.load(r)
    with urllib.request.urlopen(
        _registry(f"http://{host}/v2/{name}/blobs/{manifest['config']['digest']}"), timeout=30
    ) as r:
        diff_ids = json.load(r)["rootfs"]["diff_ids"]
    return list(zip(diff_ids, [layer["digest"] for layer in manifest["layers"]], strict=True))


@dataclass(frozen=True)
class Pull:
    """One `docker pull` on the agent: the asset layer's fate, and the bytes downloaded.

    The containerd store prints no line for a blob it already holds: its status is then "held"."""

    asset_layer_status: str
    asset_layer_bytes: int
    total_bytes: int
    seconds: float


def pull(engine: Engine, ref: str, asset_blob: str) -> Pull:
    """Pull ``ref`` (``repo@digest``) on ``engine``; read each layer's downloaded bytes from its progress."""
    repo, digest = ref.split("@")
    short = asset_blob.removeprefix("sha256:")[:12]
    got: dict[str, int] = {}
    states: dict[str, str] = {}
    t0 = time.perf_counter()
    for record in engine.client.api.pull(repo, tag=digest, stream=True, decode=True):
        if "error" in record:
            raise BenchError(f"docker pull {ref} on the agent engine: {record['error']}")
        layer = record.get("id", "")
        states[layer] = record.get("status", states.get(layer, ""))
        current = (record.get("progressDetail") or {}).get("current")
        if record.get("status") == "Downloading" and current:
            got[layer] = max(got.get(layer, 0), current)
    seconds = time.perf_counter() - t0
    return Pull(states.get(short, "held"), got.get(short, 0), sum(got.values()), seconds)


class Fleet:
    """The stand-in's CI flow on the bench engine, then an agent's pulls on an engine of its own."""

    def __init__(self, src: Path, work: Path, logs: Path, engine: Engine, registry: Registry) -> None:
        self.src, self.work, self.logs = src, work, logs
        self.engine, self.registry = engine, registry
        self.site = work / "vllm"
        self.assets_repo = f"{registry.host}/bake-assets"
        self.runtime_repo = f"{registry.host}/bake-runtime"
        self.ci_base_tag = f"{registry.host}/vllm-bench/ci_base:latest"

    def prepare(self, env: dict[str, str]) -> dict[str, str]:
        """Copy the stand-in, point it at the bench registry; return the environment of its CI."""
        shutil.copytree(self.src / VLLM_ROOT, self.site, symlinks=True)
        dockerfile = self.site / DOCKERFILE
        text = dockerfile.read_text()
        text = text.replace(f"{COMMITTED}/bake-assets", self.assets_repo)
        dockerfile.write_text(text.replace(f"{COMMITTED}/bake-runtime", self.runtime_repo))
        return {**env, "PYTHONPATH": str(self.src), "CI_BASE_IMAGE_TAG": self.ci_base_tag}

    def publish_and_pin(self, run: Callable[..., tuple[float, int]], env: dict[str, str]) -> list[str]:
        """`bake publish` (assets: there already), `bake publish --runtime`, `bake pin`; the block's refs."""
        bake = [sys.executable, "-m", "bake"]
        assets = ["--manifest", str(self.src / BENCH_MANIFEST), "--repository", self.assets_repo]
        runtime = ["--runtime", "--repository", self.runtime_repo]
        for phase, cmd in (
            ("fleet-publish-assets", [*bake, "publish", *assets]),
            ("fleet-publish-runtime", [*bake, "publish", *runtime, *HOST_NETWORK]),
            ("fleet-pin-assets", [*bake, "pin", *assets, DOCKERFILE]),
            ("fleet-pin-runtime", [*bake, "pin", *runtime, DOCKERFILE]),
        ):
            run(phase, cmd, env, self.site)
        lines = (self.site / DOCKERFILE).read_text().splitlines()
        return [
            line.split("--from=", 1)[1].split()[0] for line in lines if f"--from={self.assets_repo}" in line
        ]

    def ci_base(self, run: Callable[..., tuple[float, int]], phase: str, env: dict[str, str]) -> dict:
        """The wrapper builds and pushes ci_base; return its digest ref, seconds and the blobs it stored."""
        before = self.registry.blobs()
        seconds, mirror_bytes = run(phase, [str(self.site / WRAPPER), "ci-base-rocm-ci"], env, self.site)
        new = {d: n for d, n in self.registry.blobs().items() if d not in before}
        repo, tag = self.ci_base_tag.rsplit(":", 1)
        digest = manifest_digest(self.registry.host, repo.split("/", 1)[1], tag)
        return {"ref": f"{repo}@{digest}", "seconds": seconds, "mirror_bytes": mirror_bytes, "new_blobs": new}

    def agent(self, v1: str, v2: str, asset_blob: str, store: str) -> tuple[Pull, Pull]:
        """An empty engine of its own, with the ``store`` image store, pulls v1, then v2."""
        agent = Engine(self.work / f"agent-{store}", self.logs, namespace=f"bake-bench-agent-{store}")
        try:
            agent.start(features={"containerd-snapshotter": store == "containerd"})
            return pull(agent, v1, asset_blob), pull(agent, v2, asset_blob)
        finally:
            agent.stop()


def bench_fleet(
    run: Callable[..., tuple[float, int]],
    env: dict[str, str],
    src: Path,
    work: Path,
    logs: Path,
    engine: Engine,
    registry: Registry,
) -> dict:
    """The vLLM stand-in's flow and the agent's pulls, on both image stores."""
    fleet = Fleet(src, work, logs, engine, registry)
    env = fleet.prepare(env)
    log("builds: vLLM stand-in, bake publish and bake pin, then its wrapper builds ci_base v1 and v2")
    block = fleet.publish_and_pin(run, env)
    v1 = fleet.ci_base(run, "fleet-ci-base-v1", env)
    requirements = fleet.site / "requirements/rocm.txt"
    requirements.write_text(requirements.read_text() + "numpy\n")
    v2 = fleet.ci_base(run, "fleet-ci-base-v2", env)
    # The block's layers sit right under the runtime's, the last.
    held = {ref: layers(ref)[-(len(block) + 1) : -1] for ref in (v1["ref"], v2["ref"])}
    asset_blob = held[v1["ref"]][0][1]  # the first unit's: the bench's one asset
    agents = {}
    for store in ("classic", "containerd"):
        log(f"builds: an agent engine ({store} store) pulls ci_base v1, then v2")
        first, second = fleet.agent(v1["ref"], v2["ref"], asset_blob, store)
        log(
            f"  agent: v2's asset layer {second.asset_layer_status!r}, "
            f"{second.asset_layer_bytes} bytes pulled"
        )
        agents[store] = {
            "v1_asset_layer_bytes": first.asset_layer_bytes,
            "v1_bytes": first.total_bytes,
            "v1_seconds": first.seconds,
            "v2_asset_layer_status": second.asset_layer_status,
            "v2_asset_layer_bytes": second.asset_layer_bytes,
            "v2_bytes": second.total_bytes,
            "v2_seconds": second.seconds,
        }
    return {
        "block": block,
        "v1_seconds": v1["seconds"],
        "v2_seconds": v2["seconds"],
        "asset_bytes_from_mirror": v1["mirror_bytes"] + v2["mirror_bytes"],
        "asset_blob_uploaded": asset_blob in v2["new_blobs"],
        "same_asset_layer": held[v1["ref"]] == held[v2["ref"]],
        "agent": agents,
    }

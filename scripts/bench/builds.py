"""Measures 4-6 and the fleet check: warm rebuild, base bump, fresh builder, on the bench engine."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.layers import units_of
from bake.manifest import load_manifest
from bench.common import (
    BAKE_FILES,
    BENCH_MANIFEST,
    CHECKPOINT_MIRROR_PATH,
    STANDINS,
    BenchError,
    Profile,
    log,
    mirror_args,
)
from bench.engine import Engine, Registry
from bench.fleet import bench_fleet
from bench.processes import free_port, mirror, run

PLAIN = ["docker", "buildx", "bake", *BAKE_FILES, "--progress=plain", "image"]  # the image, as CI builds it
BASE_A, BASE_B = (f"local/rocm-standin:{tag}" for tag in STANDINS)  # the base, and the bumped one


@dataclass
class Push:
    """One `docker push`: what the asset layer did, and what the registry newly stored."""

    asset_layer_status: str
    asset_layer_bytes_uploaded: int
    asset_layer_compressed_bytes: int
    new_blob_bytes: int
    seconds: float


class Builds:
    """Measures 4-6 and the fleet check, in order, on one engine and one registry."""

    def __init__(
        self,
        profile: Profile,
        src: Path,
        root: Path,
        work: Path,
        logs: Path,
        engine: Engine,
        registry: Registry,
        digest: str,
        standin_registry: str,
    ) -> None:
        self.profile = profile
        self.src = src
        self.root = root
        self.work = work
        self.logs = logs
        self.engine = engine
        self.registry = registry
        self.digest = digest
        self.standin_registry = standin_registry
        self.mirror_port = free_port()  # one URL for every build: it is a build arg of the fetch stage
        self.image_repo = f"{registry.host}/bake-bench"
        self.assets_repo = f"{registry.host}/bake-assets"
        self.fleet_repo = f"{registry.host}/vllm-bench"

    def env(self, **extra: str) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.mirror_port}"
        return {
            **self.engine.env,
            "ASSET_MANIFEST": BENCH_MANIFEST,
            "ASSET_MIRRORS": " ".join(mirror_args(url)),
            "ASSET_DIGEST": self.digest,
            "BAKE_FETCH_ARGS": f"--no-origin --connections {self.profile.connections}",
            "BAKE_TEST_HF_TOKEN": "hf_bench_dummy_token",
            "IMAGE_NAME": self.image_repo,
            "IMAGE_TAG": "bookworm",
            **extra,
        }

    def pull_standins(self) -> None:
        for tag in STANDINS:
            remote = f"{self.standin_registry}/rocm-standin:{tag}"
            self.engine.client.images.pull(remote).tag(f"local/rocm-standin:{tag}")

    def bake(
        self, phase: str, cmd: Sequence[str], env: dict[str, str], cwd: str | Path = "."
    ) -> tuple[float, int]:
        """Run a build with the origin mirror up; return (wall seconds, asset bytes the mirror served)."""
        with mirror(self.src, self.root, self.logs, port=self.mirror_port, rate=self.profile.rate) as served:
            seconds = run(cmd, log_path=self.logs / f"{phase}.log", cwd=self.src / cwd, env=env)
        sent = served.sent(CHECKPOINT_MIRROR_PATH)
        log(f"  {phase}: {seconds:.1f} s, {sent} asset bytes from the mirror")
        return seconds, sent

    def push(self, phase: str, ref: str, asset_layer: str) -> Push:
        """`docker push` ``ref``; read the asset layer's fate from its output and the registry's store."""
        before = self.registry.blobs()
        t0 = time.perf_counter()
        records = self.engine.push(ref)
        seconds = time.perf_counter() - t0
        (self.logs / f"{phase}.log").write_text("".join(json.dumps(r) + "\n" for r in records))
        short = asset_layer.removeprefix("sha256:")[:12]
        # One record per layer state (Preparing, Waiting, ...); the last one is the outcome.
        states = [r["status"] for r in records if r.get("id") == short and "status" in r]
        status = states[-1] if states else ""
        repo, tag = ref.rsplit(":", 1)
        index = self.engine.layers(ref).index(asset_layer)
        layer = self.registry.manifest(repo.split("/", 1)[1], tag)["layers"][index]
        new = {d: n for d, n in self.registry.blobs().items() if d not in before}
        uploaded = layer["size"] if status == "Pushed" else 0
        if status not in ("Pushed", "Layer already exists") and not status.startswith("Mounted from"):
            raise BenchError(
                f"docker push {ref}: no status line for the asset layer {short}; see {self.logs / phase}.log"
            )
        stored = sum(new.values())
        log(f"  {phase}: asset layer {status!r}, {uploaded} bytes uploaded; {stored} new blob bytes")
        return Push(status, uploaded, layer["size"], stored, seconds)

    def asset_layer(self, ref: str, base: str) -> str:
        """The first layer of ``ref`` its base lacks; the base's layers must come first, unchanged."""
        layers, base_layers = self.engine.layers(ref), self.engine.layers(base)
        if layers[: len(base_layers)] != base_layers:
            raise BenchError(f"{ref} does not start with the layers of {base}")
        return layers[len(base_layers)]

    def block_layers(self, ref: str, base: str) -> list[str]:
        """The layers ``bake build --assets-image`` put right above the base: each unit's, the index's."""
        count = len(units_of(load_manifest(self.src / BENCH_MANIFEST, allow_http=True))) + 1
        start = len(self.engine.layers(base))
        return self.engine.layers(ref)[start : start + count]

    def run_all(self) -> dict:
        image_a = f"{self.image_repo}:bookworm"
        warm, layer = self._warm_rebuild(image_a)
        base_bump = self._base_bump(image_a, layer)
        fresh = self._fresh_builder(image_a, warm["cold_seconds"])
        return {"warm_rebuild": warm, "base_bump": base_bump, "fresh_builder": fresh}

    def _warm_rebuild(self, image_a: str) -> tuple[dict, str]:
        """Measure 4: a cold build, then the same again; the figures, and the cold build's asset layer."""
        log("builds: warm rebuild")
        cold_s, cold_bytes = self.bake("cold-build", PLAIN, self.env())
        layer = self.asset_layer(image_a, BASE_A)
        warm_s, warm_bytes = self.bake("warm-build", PLAIN, self.env())
        return {
            "cold_seconds": cold_s,
            "cold_asset_bytes": cold_bytes,
            "warm_seconds": warm_s,
            "warm_asset_bytes": warm_bytes,
            "warm_vs_cold": warm_s / cold_s,
            "same_asset_layer": self.asset_layer(image_a, BASE_A) == layer,
        }, layer

    def _base_bump(self, image_a: str, layer: str) -> dict:
        """Measure 5: the first image pushed, then the image on the other base built and pushed."""
        image_b = f"{self.image_repo}:bookworm-slim"
        log("builds: base bump")
        first = self.push("push-first-base", image_a, layer)
        bump_s, bump_bytes = self.bake(
            "base-bump-build", PLAIN, self.env(BASE_IMAGE=BASE_B, IMAGE_TAG="bookworm-slim")
        )
        bumped = self.push("push-base-bump", image_b, self.asset_layer(image_b, BASE_B))
        return {
            "first_push_asset_layer_status": first.asset_layer_status,
            "first_push_asset_layer_bytes": first.asset_layer_bytes_uploaded,
            "build_seconds": bump_s,
            "build_asset_bytes_from_mirror": bump_bytes,
            "push_seconds": bumped.seconds,
            "asset_layer_status": bumped.asset_layer_status,
            "asset_layer_bytes_uploaded": bumped.asset_layer_bytes_uploaded,
            "asset_layer_compressed_bytes": bumped.asset_layer_compressed_bytes,
            "new_blob_bytes": bumped.new_blob_bytes,
            "same_asset_layer": self.asset_layer(image_b, BASE_B) == layer,
        }

    def _fresh_builder(self, image_a: str, cold_s: float) -> dict:
        """Measure 6 (and the fleet's, 8): the assets image published, then built on a wiped engine."""
        build = [sys.executable, "-m", "bake", "build", "--assets-image", self.assets_repo]
        via_assets_image = [*build, "--", *BAKE_FILES, "--progress=plain", "image"]
        log("builds: publish the assets image")
        before = self.registry.blobs()
        publish_s, publish_bytes = self.bake("publish-assets-image", via_assets_image, self.env())
        publish_new = sum(n for d, n in self.registry.blobs().items() if d not in before)
        pulled = sum(blob["size"] for blob in self.registry.manifest("bake-assets", self.digest)["layers"])
        fleet_env = self.env(BASE_IMAGE=BASE_B, FETCH_IMAGE=BASE_A)
        published = self.block_layers(image_a, BASE_A)
        fleet = bench_fleet(self.bake, fleet_env, self.src, self.work, self.logs, self.engine, self.registry)

        log("builds: fresh builder (engine data root deleted; the registry stays)")
        self.engine.wipe()
        self.pull_standins()
        fresh_s, fresh_bytes = self.bake("fresh-builder-build", via_assets_image, self.env())
        return {
            "assets_image": f"{self.assets_repo}:{self.digest}",
            "publish_seconds": publish_s,
            "publish_asset_bytes_from_mirror": publish_bytes,
            "publish_new_blob_bytes": publish_new,
            "seconds": fresh_s,
            "origin_asset_bytes": fresh_bytes,
            "registry_asset_bytes": pulled,
            "vs_cold": fresh_s / cold_s,
            # The block's layers (a unit's, the index's), as the build before the wipe made them.
            "same_asset_layer": self.block_layers(image_a, BASE_A) == published,
            "fleet": fleet,
        }


def bench_builds(
    profile: Profile, src: Path, root: Path, work: Path, logs: Path, digest: str, standin_registry: str
) -> dict:
    """Measures 4-6, with their engine and registry started and stopped here."""
    engine = Engine(work / "engine", logs)
    registry = Registry(work, logs)
    with contextlib.ExitStack() as stack:
        registry.start()
        stack.callback(registry.stop)
        stack.callback(engine.stop)
        engine.start()
        builds = Builds(profile, src, root, work, logs, engine, registry, digest, standin_registry)
        builds.pull_standins()
        return builds.run_all()

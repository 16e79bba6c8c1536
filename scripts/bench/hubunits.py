"""Measure 13: Hub files as units of their own: what a layer costs, a bump, a shared file, a large repository.

- **What a layer costs an agent** (how the default ``HUB_FILE_THRESHOLD`` was chosen): an empty engine
  per image store pulls an image of K tiny files in one layer, the same files in K layers, and one
  layer of random bytes; the extra seconds per layer, times the rate the big layer pulls at, is the
  size of file that costs an agent as much to pull again as one more layer costs it every time.
- **A config-only bump** of a loopback Hub repository (a weights file and small files): each
  version is pinned with ``bake add``, published, pinned into a Dockerfile and built as CI would;
  an empty engine per store pulls v0 then v1, and the bytes it pulls are the registry's own (its
  log), set against the block's changed layers. Side by side, the same bump of a repository whose
  threshold lies above its weights, so that it is one unit, as round 4 made it.
- **One file in two repositories**: both pinned in one manifest, published and built; the blobs of
  that size the registry stores for the unit, and the bytes an agent that needs both pulls.
- **A repository of 200 files**, each at the threshold (the manifest's): more units than the layer
  budget; the block bake writes for it, built on this engine, then pulled and run by an empty engine
  on each store.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import statistics
import sys
import tarfile
import time
from pathlib import Path

from bake import layers
from bake.manifest import load_manifest
from bench.common import MIB, Profile, log
from bench.engine import Engine, Registry, agent_pulls
from bench.fleet import HOST_NETWORK, manifest_digest
from bench.fleet import layers as image_layers
from bench.layers import in_turn, pull_wiped, random_unit_tar
from bench.processes import hub_server, run

STORES = ("classic", "containerd")
STANDIN = "local/rocm-standin:bookworm"
# pip in the fetch stage (huggingface_hub, for hf:// sources) reaches PyPI through the machine's CA only.
MACHINE_CA = "/etc/ssl/certs/ca-certificates.crt"
# Tiny files for the per-layer cost: as many layers as a block of large Hub files may hold.
TINY_LAYERS, TINY_BYTES = 32, 1024


def _tiny_tar(path: Path, names: list[str]) -> Path:
    """A layer tar holding a tiny file of random bytes at each asset path of ``names``, as bake writes one."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as out:
        for name in names:
            info = tarfile.TarInfo(f"{layers.ROOT}/{name}")
            info.size, info.mode, info.mtime = TINY_BYTES, 0o444, 0
            out.addfile(info, io.BytesIO(os.urandom(TINY_BYTES)))
    return path


def _layer_images(work: Path, store: Registry, big: int) -> dict[str, str]:
    """Push the three images of the layer-cost measure; return kind -> reference."""
    names = [f"data/tiny-{i}" for i in range(TINY_LAYERS)]
    one = layers.compress(_tiny_tar(work / "one.tar", names))
    many = [layers.compress(_tiny_tar(work / f"many-{i}.tar", [name])) for i, name in enumerate(names)]
    weights = layers.compress(random_unit_tar(work, big))
    refs = {}
    for kind, blobs in (("one layer", [one]), (f"{TINY_LAYERS} layers", many), ("big", [weights])):
        name = f"layer-cost/{kind.replace(' ', '-')}"
        store.push_image(name, "v", blobs)
        refs[kind] = f"{store.host}/{name}:v"
    return refs


def bench_layer_cost(profile: Profile, work: Path, logs: Path) -> dict:
    """What one more layer costs an agent's pull, per store, and the file size that costs as much."""
    big = 256 * MIB if profile.name == "full" else 16 * MIB
    repeats = 5 if profile.name == "full" else 1
    work.mkdir(parents=True)
    store = Registry(work, logs)
    store.start()
    try:
        refs = _layer_images(work, store, big)
        result: dict = {"layers": TINY_LAYERS, "big_bytes": big, "repeats": repeats, "stores": {}}
        for kind in STORES:
            engine = Engine(work / kind, logs, namespace=f"bake-bench-cost-{kind}")
            engine.start(features={"containerd-snapshotter": kind == "containerd"})
            try:
                runs: dict[str, list[float]] = {ref: [] for ref in refs}
                for which in in_turn(list(refs), repeats):
                    runs[which].append(pull_wiped(engine, refs[which]))
            finally:
                engine.stop()
            seconds = {which: statistics.median(times) for which, times in runs.items()}
            per_layer = (seconds[f"{TINY_LAYERS} layers"] - seconds["one layer"]) / (TINY_LAYERS - 1)
            rate = big / max(seconds["big"] - seconds["one layer"], 1e-3)
            row = {"runs": runs, "seconds": seconds, "per_layer_seconds": per_layer, "bytes_per_second": rate}
            row["same_cost_bytes"] = per_layer * rate
            result["stores"][kind] = row
            log(
                f"  layer cost, {kind}: {per_layer * 1000:.1f} ms a layer, {rate / MIB:.0f} MiB/s: one layer "
                f"costs what {row['same_cost_bytes'] / MIB:.1f} MiB cost to pull"
            )
        return result
    finally:
        store.stop()


class BenchHub:
    """The repositories the loopback Hub serves (tests/hub_server.py's spec): each commit's files, the
    large ones as LFS files on disk, the others inline; ``main`` follows the last commit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spec = root / "hub-spec.json"
        self.repos: dict[str, dict] = {}
        self._writes = 0
        root.mkdir(parents=True)
        self._write()

    def commit(self, repo: str, files: dict[str, bytes]) -> str:
        """Add a commit of ``files`` to ``repo`` and point its ``main`` at it; return its id."""
        commit = hashlib.sha1(repo.encode() + json.dumps(sorted(files)).encode() + os.urandom(8)).hexdigest()
        held = {}
        for path, data in files.items():
            if len(data) < MIB:
                held[path] = {"data": base64.b64encode(data).decode()}
                continue
            source = self.root / hashlib.sha256(data).hexdigest()
            if not source.exists():
                source.write_bytes(data)
            held[path] = {"file": str(source), "lfs": True}
        entry = self.repos.setdefault(repo, {"repo": repo, "type": "model", "refs": {}, "commits": {}})
        entry["commits"][commit] = held
        entry["refs"]["main"] = commit
        self._write()
        return commit

    def _write(self) -> None:
        tmp = self.spec.with_suffix(".tmp")
        tmp.write_text(json.dumps({"repos": list(self.repos.values())}))
        tmp.replace(self.spec)
        # The server re-reads the spec on a new mtime: make sure it is new even within one clock tick.
        self._writes += 1
        now = time.time_ns()
        os.utime(self.spec, ns=(now, now + self._writes))


class HubSite:
    """A Dockerfile whose block takes bake's units of Hub repositories: pinned with ``bake add`` from
    the loopback Hub, published, pinned and built on the bench engine, pushed to the bench registry."""

    def __init__(self, name: str, src: Path, work: Path, logs: Path, registry: Registry, env: dict) -> None:
        self.name, self.work, self.logs, self.registry = name, work, logs, registry
        self.root = work / name
        self.root.mkdir(parents=True)
        self.repository = f"{registry.host}/{name}/assets"
        (self.root / "Dockerfile").write_text(
            f"FROM {STANDIN}\n# bake: the asset units, then the index (`bake pin`)\n"
            f"COPY --link --from={self.repository} / /\n"
        )
        self.env = {**env, "PYTHONPATH": str(src), "XDG_CACHE_HOME": str(self.root / "xdg")}

    def bake(self, phase: str, *args: str) -> float:
        log_path = self.logs / f"{self.name}-{phase}.log"
        return run([sys.executable, "-m", "bake", *args], log_path=log_path, cwd=self.root, env=self.env)

    def manifest(self, phase: str, urls: list[str], units: str = "") -> Path:
        """A manifest of ``bake add URL`` for each of ``urls``, with ``units`` (a [units] table) first."""
        path = self.root / f"{phase}.toml"
        path.write_text(units)
        for i, url in enumerate(urls):
            self.bake(f"{phase}-add-{i}", "add", url, "--manifest", str(path))
        return path

    def version(self, phase: str, manifest: Path) -> dict:
        """Publish, pin and build ``manifest`` as ``phase``; the image's ref, its block's layers and sizes."""
        assets = ["--manifest", str(manifest), "--repository", self.repository]
        publish = self.bake(f"{phase}-publish", "publish", *assets, *HOST_NETWORK)
        self.bake(f"{phase}-pin", "pin", *assets, "Dockerfile")
        tag = f"{self.registry.host}/{self.name}/image:{phase}"
        cmd = ["docker", "buildx", "build", "--provenance=false"]
        cmd += ["--output", f"type=image,name={tag},push=true", "."]
        build_log = self.logs / f"{self.name}-{phase}-build.log"
        build = run(cmd, log_path=build_log, cwd=self.root, env=self.env)
        ref = f"{tag.rsplit(':', 1)[0]}@{manifest_digest(self.registry.host, f'{self.name}/image', phase)}"
        lines = (self.root / "Dockerfile").read_text().splitlines()
        block = sum(f"--from={self.repository}" in line for line in lines)
        units, _ = layers.fit_budget(layers.units_of(load_manifest(manifest, allow_http=True)))
        return {
            "phase": phase, "ref": ref, "publish_seconds": publish, "build_seconds": build,
            "units": [{"name": u.name, "paths": len(u.paths), "size": u.size} for u in units],
            "block_layers": image_layers(ref)[-block:], "sizes": self.registry.layer_sizes(ref),
        }  # fmt: skip


def _model_files(weights: bytes, config: dict) -> dict[str, bytes]:
    """A model repository: a weights file (an LFS file), and the small files beside it."""
    return {
        "model.safetensors": weights,
        "config.json": json.dumps(config).encode(),
        "tokenizer.json": json.dumps({"model": {"vocab": {f"w{i}": i for i in range(4000)}}}).encode(),
        "generation_config.json": b'{"do_sample": false}',
        "README.md": b"# a model for the bench\n",
    }


def _bump(site: HubSite, hub: BenchHub, weights: bytes, repo: str, units: str = "") -> dict:
    """v0, then a commit that changes config.json alone; an agent per store pulls v0, then v1.
    ``units``: the manifests' [units] table."""
    hub.commit(repo, _model_files(weights, {"version": 0}))
    first = site.manifest("v0", [f"hf://{repo}"], units)
    hub.commit(repo, _model_files(weights, {"version": 1}))
    second = site.manifest("v1", [f"hf://{repo}"], units)
    versions = [site.version("v0", first), site.version("v1", second)]
    pulls = agent_pulls(site.registry, site.work, site.logs, site.name, versions)
    for store, rows in pulls.items():
        log(
            f"  config-only bump ({site.name}), {store}: {rows[1]['bytes'] / MIB:.2f} MiB pulled, "
            f"{rows[1]['ratio']:.3f}x the block's changed layers "
            f"({rows[1]['changed_block_bytes'] / MIB:.2f} MiB)"
        )
    return {"versions": versions, "pulls": pulls}


def _shared(site: HubSite, hub: BenchHub, weights: bytes) -> dict:
    """Two repositories that hold the same weights file, in one manifest: what the registry stores of
    that size, and what an agent that needs both pulls."""
    hub.commit("bench/model-fork", _model_files(weights, {"fork": True}))
    manifest = site.manifest("both", ["hf://bench/model", "hf://bench/model-fork"])
    before = site.registry.blobs()
    version = site.version("both", manifest)
    stored = sorted(n for d, n in site.registry.blobs().items() if d not in before and n >= len(weights))
    pulls = agent_pulls(site.registry, site.work, site.logs, site.name, [version])
    for store, rows in pulls.items():
        log(f"  one file in two repositories, {store}: {rows[0]['asset_bytes'] / MIB:.2f} MiB of the block")
    return {"version": version, "new_blobs_of_its_size": stored, "pulls": pulls}


def _many(site: HubSite, hub: BenchHub, count: int, size: int) -> dict:
    """A repository of ``count`` files of ``size`` bytes, each a unit of its own at that threshold: more
    units than the budget. Its block, built on the bench engine, then run on an empty engine per store."""
    hub.commit("bench/many", {f"data/shard-{i:03}.bin": os.urandom(size) for i in range(count)})
    manifest = site.manifest("many", ["hf://bench/many"], f"[units]\nhub_file_threshold = {size}\n")
    version = site.version("many", manifest)
    ran = {}
    for store in STORES:
        agent = Engine(site.work / f"run-{store}", site.logs, namespace=f"bake-bench-run-{store}")
        agent.start(features={"containerd-snapshotter": store == "containerd"})
        try:
            repo, digest = version["ref"].split("@")
            agent.client.images.pull(repo, tag=digest)
            agent.client.containers.run(version["ref"], ["true"], network_mode="none", remove=True)
            ran[store] = True
        finally:
            agent.stop()
    found = {
        "files": count,
        "file_bytes": size,
        "units_before_packing": len(layers.units_of(load_manifest(manifest, allow_http=True))),
        "units": len(version["units"]),
        "block_layers": len(version["block_layers"]),
        "image_layers": len(image_layers(version["ref"])),
        "budget": layers.LAYER_BUDGET,
        "ran": ran,
        "version": version,
    }
    log(
        f"  a repository of {count} files: {found['units_before_packing']} units packed to {found['units']}, "
        f"a block of {found['block_layers']} "
        f"layers, {found['image_layers']} in the image; built, and run on {', '.join(ran)}"
    )
    return found


def bench_hub_units(profile: Profile, src: Path, work: Path, logs: Path, standin_registry: str) -> dict:
    """Measure 14 (see the module): the layer cost, a config-only bump, a file in two repositories."""
    size = 256 * MIB if profile.name == "full" else 16 * MIB
    result: dict = {"weights_bytes": size, "threshold": layers.HUB_FILE_THRESHOLD}
    result["layer_cost"] = bench_layer_cost(profile, work / "layer-cost", logs)
    engine = Engine(work / "builder", logs, namespace="bake-bench-hub")
    registry = Registry(work, logs, level="info")
    registry.start()
    engine.start()
    weights = os.urandom(size)
    try:
        engine.client.images.pull(f"{standin_registry}/rocm-standin:bookworm").tag(STANDIN)
        hub = BenchHub(work / "hub")
        with hub_server(src, hub.spec, logs) as endpoint:
            env = {**engine.env, "FETCH_IMAGE": STANDIN, "HF_ENDPOINT": endpoint}
            env |= {"HF_HUB_DISABLE_XET": "1", "SSL_CERT_FILE": MACHINE_CA}
            bump = HubSite("bump", src, work, logs, registry, env)
            result["bump"] = _bump(bump, hub, weights, "bench/model")
            # Side by side: the same bump with the weights in the repository's one unit (round 4's rule).
            whole = HubSite("whole", src, work, logs, registry, env)
            above = f"[units]\nhub_file_threshold = {2 * size}\n"
            result["bump_one_unit"] = _bump(whole, hub, weights, "bench/whole", above)
            shared = HubSite("shared", src, work, logs, registry, env)
            result["shared"] = _shared(shared, hub, weights)
            many = HubSite("many", src, work, logs, registry, env)
            result["many"] = _many(many, hub, 200, MIB if profile.name == "full" else 64 * 1024)
        return result
    finally:
        engine.stop()
        registry.stop()


def hub_units_row(m: dict) -> tuple[str, bool]:
    """Row 14 of the verdicts: the layer cost per store, the bump's and the shared file's pulls."""
    hub = m["hub_units"]
    cost = "; ".join(
        f"{store} {row['per_layer_seconds'] * 1000:.1f} ms a layer at "
        f"{row['bytes_per_second'] / MIB:.0f} MiB/s (= {row['same_cost_bytes'] / MIB:.1f} MiB)"
        for store, row in hub["layer_cost"]["stores"].items()
    )
    bump = hub["bump"]["pulls"]
    bumped = ", ".join(
        f"{store} {rows[1]['bytes'] / MIB:.2f} MiB ({rows[1]['ratio']:.3f}x the changed "
        f"{rows[1]['changed_block_bytes'] / MIB:.2f} MiB; in one unit "
        f"{hub['bump_one_unit']['pulls'][store][1]['bytes'] / MIB:.2f} MiB)"
        for store, rows in bump.items()
    )
    weights = hub["weights_bytes"]
    shared = hub["shared"]
    pulled = {store: rows[0]["asset_bytes"] / weights for store, rows in shared["pulls"].items()}
    stored = len(shared["new_blobs_of_its_size"])
    many = hub["many"]
    fits = many["block_layers"] <= many["budget"] and all(many["ran"].values())
    met = bump["containerd"][1]["ratio"] <= 1.05 and max(pulled.values()) <= 1.05 and stored <= 2 and fits
    return (
        f"a layer costs {cost}; threshold {hub['threshold'] / MIB:.0f} MiB. Config-only bump of a "
        f"{weights / MIB:.0f} MiB weights file and small files, pulled: {bumped}. One file in two "
        f"repositories: {stored} new blob(s) of its size (the unit's, and the built image's copy), the block "
        "pulled once: "
        + ", ".join(f"{store} {ratio:.3f}x the file" for store, ratio in pulled.items())
        + f". A repository of {many['files']} files ({many['units_before_packing']} units): a block of "
        f"{many['block_layers']} layers ({many['units']} units and the index), {many['image_layers']} in "
        "the image, built here and run on " + ", ".join(store for store, ok in many["ran"].items() if ok),
        met,
    )

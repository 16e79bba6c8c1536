"""Measure 11: a cold pull of one asset unit of incompressible bytes, against the floor for those bytes.

bake writes the unit's layer and pushes it (bake.layers, bake.registry) three ways to a throw-away
registry: as bake publishes weights (its own choice), zstd, and gzip (what `docker push` makes).
An empty engine pulls each: dockerd on the classic and on the containerd image store, and the
containerd store's own daemon pulling by itself (`ctr images pull`, its transfer service: the
fetch and unpack run inside containerd, as a Kubernetes node's CRI pull does). The containerd
pull is also timed in its two steps, with `ctr`: `content fetch` (the blob into the content
store), then `images pull` of the fetched image (the unpack alone).

The floor is what a pull must do at least, on the same disk: `curl` of the blob, through
`sha256sum` and `tar -x` (and the decompressor); each pull is also set against the floor of the
raw bytes (the uncompressed blob's). Each figure is the median of 5 rounds (the smoke profile: 1), the
three blobs taken in turn in each round (a rotating order, so a busy spell of the shared machine
falls on each, floors too); the engine is wiped before each pull.
"""

from __future__ import annotations

import gzip
import os
import shutil
import statistics
import subprocess
import tarfile
import time
from pathlib import Path

from bake import layers
from bench.common import MIB, Profile, log
from bench.engine import Engine, Registry

CHUNK = 4 * MIB
# A pull's time moves by a third between runs on a shared 2-core machine: more rounds than the profile's 3.
FULL_REPEATS = 5


def unit_tar(data: Path, name: str) -> Path:
    """A unit's layer tar beside ``data``, holding it at the asset path ``name``, as bake.layers writes
    one (root's, mtime 0, 0444); ``data`` itself is removed."""
    tar = data.with_suffix(".tar")
    with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT) as out:
        info = out.gettarinfo(str(data), f"{layers.ROOT}/{name}")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime, info.mode = 0, 0o444
        with data.open("rb") as f:
            out.addfile(info, f)
    data.unlink()
    return tar


def random_unit_tar(work: Path, size: int) -> Path:
    """A unit's layer tar holding ``size`` random bytes."""
    data = work / "weights.bin"
    with data.open("wb") as f:
        for left in range(size, 0, -CHUNK):
            f.write(os.urandom(min(CHUNK, left)))
    return unit_tar(data, "data/weights.bin")


def _variants(tar: Path) -> dict[str, layers.Layer]:
    """The same tar as bake publishes it (its own choice), as zstd, and as gzip."""
    chosen = layers.compress(tar)
    zst = tar.with_suffix(".zst.tar.zst")
    subprocess.run(["zstd", "-q", "-f", "-T0", "-3", str(tar), "-o", str(zst)], check=True)
    gz = tar.with_suffix(".tar.gz")
    with tar.open("rb") as f, gz.open("wb") as raw, gzip.GzipFile("", "wb", 6, raw, mtime=0) as z:
        shutil.copyfileobj(f, z, CHUNK)

    def layer(path: Path, media_type: str) -> layers.Layer:
        return layers.Layer(
            path, media_type, layers.digest_of(path), path.stat().st_size, chosen.diff_id, chosen.tar_size
        )

    return {
        f"bake ({chosen.compression})": chosen,
        "zstd": layer(zst, f"{layers.TAR}+zstd"),
        "gzip": layer(gz, f"{layers.TAR}+gzip"),
    }


def _floor(host: str, name: str, layer: layers.Layer, dest: Path) -> float:
    """Seconds to fetch the blob, hash it and unpack it: the least a pull does."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    unpack = {"none": "", "zstd": "zstd -dc -T0 |", "gzip": "gzip -dc |"}[layer.compression]
    url = f"http://{host}/v2/{name}/blobs/{layer.digest}"
    script = f"curl -sf {url} | tee >(sha256sum >/dev/null) | {unpack} tar -x -C {dest}"
    t0 = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c", script], check=True)
    seconds = time.perf_counter() - t0
    shutil.rmtree(dest)
    return seconds


def pull_wiped(engine: Engine, ref: str) -> float:
    """Seconds ``engine`` takes to pull ``ref`` once it is wiped empty."""
    engine.wipe()
    repository, tag = ref.rsplit(":", 1)
    t0 = time.perf_counter()
    engine.client.images.pull(repository, tag=tag)
    return time.perf_counter() - t0


def _ctr(engine: Engine, *args: str) -> float:
    """Seconds ``ctr`` takes for ``args`` against the engine's own containerd, in its namespace."""
    sock = str(engine.work / "exec/containerd/containerd.sock")
    t0 = time.perf_counter()
    subprocess.run(
        ["ctr", "--address", sock, "--namespace", engine.namespace, *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def _pull_in_daemon(engine: Engine, ref: str) -> float:
    """The containerd store's daemon pulls by itself: fetch and unpack inside containerd."""
    engine.wipe()
    return _ctr(engine, "images", "pull", "--plain-http", "--snapshotter", "overlayfs", ref)


def _phases(engine: Engine, ref: str) -> tuple[float, float]:
    """A containerd pull in its two steps: the blob into the content store, then the unpack alone."""
    engine.wipe()
    fetch = _ctr(engine, "content", "fetch", "--plain-http", ref)
    return fetch, _ctr(engine, "images", "pull", "--local", "--plain-http", "--snapshotter", "overlayfs", ref)


def in_turn(kinds: list[str], repeats: int) -> list[str]:
    """Each kind once per round, the round's first kind rotating."""
    return [kinds[(r + k) % len(kinds)] for r in range(repeats) for k in range(len(kinds))]


# How each column pulls: the engine's image store, and who pulls.
PULLERS = {"classic": ("classic", pull_wiped), "containerd": ("containerd", pull_wiped)}
PULLERS["containerd_daemon"] = ("containerd", _pull_in_daemon)


def _in_two_steps(engine: Engine, refs: dict[str, str], variants: dict[str, dict], repeats: int) -> None:
    """Time containerd's fetch and unpack apart, each variant in turn, into its row of ``variants``."""
    for variant in in_turn(list(refs), repeats):
        fetch, unpack = _phases(engine, refs[variant])
        variants[variant].setdefault("containerd_fetch_runs", []).append(fetch)
        variants[variant].setdefault("containerd_unpack_runs", []).append(unpack)
    for variant, row in variants.items():
        for step in ("fetch", "unpack"):
            row[f"containerd_{step}_seconds"] = statistics.median(row[f"containerd_{step}_runs"])
        log(
            f"  containerd in two steps, {variant}: fetch {row['containerd_fetch_seconds']:.2f} s, "
            f"unpack {row['containerd_unpack_seconds']:.2f} s"
        )


def bench_cold_pull(profile: Profile, work: Path, logs: Path) -> dict:
    """Measure 11 (see the module)."""
    size = profile.size * 2
    repeats = FULL_REPEATS if profile.name == "full" else profile.repeats
    work.mkdir(parents=True)
    store = Registry(work, logs)
    store.start()
    engines = {}
    try:
        log(f"cold pull: a {size / MIB:.0f} MiB unit of random bytes, stored, zstd and gzip")
        variants = _variants(random_unit_tar(work, size))
        refs = {}
        for i, (kind, layer) in enumerate(variants.items()):
            store.push_unit(f"cold/{i}", "cold", layer)
            refs[kind] = f"{store.host}/cold/{i}:cold"
        result: dict = {"size_bytes": size, "repeats": repeats, "variants": {}}
        floors: dict[str, list[float]] = {kind: [] for kind in refs}
        for kind in in_turn(list(refs), repeats):
            name = refs[kind].split("/", 1)[1].rsplit(":", 1)[0]
            floors[kind].append(_floor(store.host, name, variants[kind], work / "floor"))
        for kind, layer in variants.items():
            result["variants"][kind] = {
                "media_type": layer.media_type,
                "blob_bytes": layer.size,
                "floor_runs": floors[kind],
                "floor_seconds": statistics.median(floors[kind]),
            }
        raw_floor = next(row for row in result["variants"].values() if row["media_type"] == layers.TAR)
        for column, (kind, puller) in PULLERS.items():
            if kind not in engines:
                for engine in engines.values():
                    engine.stop()
                engines[kind] = Engine(work / kind, logs, namespace=f"bake-bench-{kind}")
                engines[kind].start(features={"containerd-snapshotter": kind == "containerd"})
            seconds: dict[str, list[float]] = {variant: [] for variant in refs}
            for variant in in_turn(list(refs), repeats):
                seconds[variant].append(puller(engines[kind], refs[variant]))
            for variant, runs in seconds.items():
                row = result["variants"][variant]
                row[f"{column}_runs"] = runs
                row[f"{column}_seconds"] = statistics.median(runs)
                row[f"{column}_vs_floor"] = row["floor_seconds"] / row[f"{column}_seconds"]
                row[f"{column}_vs_raw_floor"] = raw_floor["floor_seconds"] / row[f"{column}_seconds"]
                floors = f"floor {row['floor_seconds']:.2f} s, raw {raw_floor['floor_seconds']:.2f} s"
                log(f"  {column}, {variant}: {row[f'{column}_seconds']:.2f} s ({floors})")
        _in_two_steps(engines["containerd"], refs, result["variants"], repeats)  # the one running
        return result
    finally:
        for engine in engines.values():
            engine.stop()
        store.stop()

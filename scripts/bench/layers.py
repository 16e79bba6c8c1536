"""Measure 11: a cold pull of one asset unit of incompressible bytes, against the floor for those bytes.

bake writes the unit's layer and pushes it (bake.layers, bake.registry) three ways to a throw-away
registry: as bake publishes weights (stored, uncompressed), zstd, and gzip (what `docker push`
makes). An empty engine pulls each, on the classic and on the containerd image store. The floor
is what a pull must do at least, on the same disk: `curl` of the blob, through `sha256sum` and
`tar -x`. Each figure is the median of the profile's repeats; the engine is wiped before each pull.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import statistics
import subprocess
import tarfile
import time
from pathlib import Path

from bake import layers, registry
from bench.common import MIB, Profile, log
from bench.engine import Engine, Registry

CHUNK = 4 * MIB


def _unit_tar(work: Path, size: int) -> Path:
    """A unit's layer tar holding ``size`` random bytes at an asset path, as bake.layers writes one."""
    data = work / "weights.bin"
    with data.open("wb") as f:
        for left in range(size, 0, -CHUNK):
            f.write(os.urandom(min(CHUNK, left)))
    tar = work / "unit.tar"
    with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT) as out:
        info = out.gettarinfo(str(data), f"{layers.ROOT}/data/weights.bin")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime, info.mode = 0, 0o444
        with data.open("rb") as f:
            out.addfile(info, f)
    data.unlink()
    return tar


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


def _push(host: str, name: str, layer: layers.Layer) -> str:
    target = registry.Registry(f"{host}/{name}")
    config, manifest = layers.image([layer])
    target.push_blob(layer.digest, path=layer.path)
    target.push_blob(f"sha256:{hashlib.sha256(config).hexdigest()}", data=config)
    target.put_manifest("cold", manifest, layers.MANIFEST_TYPE)
    return f"{host}/{name}:cold"


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


def _pull(engine: Engine, ref: str) -> float:
    engine.wipe()
    repository, tag = ref.rsplit(":", 1)
    t0 = time.perf_counter()
    engine.client.images.pull(repository, tag=tag)
    return time.perf_counter() - t0


def bench_cold_pull(profile: Profile, work: Path, logs: Path) -> dict:
    """Measure 11 (see the module)."""
    size = profile.size * 2
    work.mkdir(parents=True)
    store = Registry(work, logs)
    store.start()
    engines = {}
    try:
        log(f"cold pull: a {size / MIB:.0f} MiB unit of random bytes, stored, zstd and gzip")
        tar = _unit_tar(work, size)
        variants = _variants(tar)
        refs = {
            kind: _push(store.host, f"cold/{i}", layer) for i, (kind, layer) in enumerate(variants.items())
        }
        result: dict = {"size_bytes": size, "repeats": profile.repeats, "variants": {}}
        for kind, layer in variants.items():
            name = refs[kind].split("/", 1)[1].rsplit(":", 1)[0]
            floor = [_floor(store.host, name, layer, work / "floor") for _ in range(profile.repeats)]
            result["variants"][kind] = {
                "media_type": layer.media_type,
                "blob_bytes": layer.size,
                "floor_seconds": statistics.median(floor),
            }
        for kind in ("classic", "containerd"):
            engine = engines[kind] = Engine(work / kind, logs, namespace=f"bake-bench-{kind}")
            engine.start(features={"containerd-snapshotter": kind == "containerd"})
            for variant, ref in refs.items():
                seconds = statistics.median(_pull(engine, ref) for _ in range(profile.repeats))
                row = result["variants"][variant]
                row[f"{kind}_seconds"] = seconds
                row[f"{kind}_vs_floor"] = row["floor_seconds"] / seconds
                log(f"  {kind} store, {variant}: {seconds:.2f} s (floor {row['floor_seconds']:.2f} s)")
            engine.stop()
        return result
    finally:
        for engine in engines.values():
            engine.stop()
        store.stop()

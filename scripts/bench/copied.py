"""Which blob an asset unit's layer has inside an image that uses it (`scripts/bench.py --copied`).

Two units are pushed as bake publishes them: 8 MiB of random bytes (stored uncompressed) and 14 MiB
of text (zstd). Then an image that holds them is built with the engine's own `docker` build driver,
in each Dockerfile shape below, on the classic and on the containerd image store, and pushed each
way below; the engine is wiped before each build, so no blob of an earlier export is reused. Each
layer of the pushed manifest, read from the registry, is named: one of the units' own blobs, the
base's own blob, or a new blob, with its media type.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

from bake import layers
from bench.common import MANIFEST_TYPES, MIB, log
from bench.engine import Engine, Registry
from bench.layers import unit_tar

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json"
)

SHAPES = {
    "the block (COPY --link --from=unit, as bake pin writes it)": (
        "FROM {base}\nRUN echo slow > /slow\nCOPY --link --from={u} / /\nCOPY --link --from={z} / /\n"
    ),
    "a stage FROM the units, copied": (
        "FROM {u} AS units\nCOPY --link --from={z} / /\n"
        "FROM {base}\nRUN echo slow > /slow\nCOPY --link --from=units / /\n"
    ),
    "FROM the unit (its layer the base's)": "FROM {u}\nCOPY --link --from={base} / /\n",
}
# How the image leaves the engine: None is `--load`, then `docker push`; else buildx's --output.
OUTPUTS = {
    "--load, then docker push": None,
    "--output type=registry": "type=registry,name={ref}",
    "--output type=registry,compression=zstd": "type=registry,name={ref},compression=zstd",
    "… compression=zstd,force-compression=true": (
        "type=registry,name={ref},compression=zstd,force-compression=true"
    ),
}


def _unit(work: Path, name: str, data: bytes) -> layers.Layer:
    """A unit's layer as bake publishes it: one file under the assets root, compressed by bake's rule."""
    src = work / f"{name}.bin"
    src.write_bytes(data)
    return layers.compress(unit_tar(src, src.name))


def _layers_of(host: str, name: str, tag: str) -> list[dict]:
    """The pushed image's layer descriptors (an index's first image manifest, not an attestation)."""

    def get(reference: str, accept: str) -> dict:
        request = urllib.request.Request(
            f"http://{host}/v2/{name}/manifests/{reference}", headers={"Accept": accept}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)

    doc = get(tag, f"{MANIFEST_TYPES}, {INDEX_TYPES}")
    if "manifests" in doc:
        first = next(m for m in doc["manifests"] if m.get("platform", {}).get("os") != "unknown")
        doc = get(first["digest"], first["mediaType"])
    return doc["layers"]


def _build_and_push(engine: Engine, context: Path, ref: str, spec: str | None, log_path: Path) -> None:
    """Build ``context`` on a wiped engine (no blob an earlier export made) and push it as ``ref``."""
    engine.wipe()
    build = ["docker", "buildx", "build", "--network=host", "--progress=plain", str(context)]
    build += ["--load", "-t", ref] if spec is None else ["--output", spec.format(ref=ref)]
    with open(log_path, "ab") as out:
        for cmd in [build] + ([["docker", "push", ref]] if spec is None else []):
            subprocess.run(cmd, env=engine.env, stdout=out, stderr=out, check=True)


def bench_copied_units(work: Path, logs: Path, standin_registry: str) -> dict:
    """Build and push each shape each way on both stores; return every pushed layer, named."""
    work.mkdir(parents=True)
    store = Registry(work, logs)
    store.start()
    try:
        repository = f"{store.host}/copied"
        units = {
            "U": _unit(work, "weights", os.urandom(8 * MIB)),
            "Z": _unit(work, "vocab", b"".join(b"token %d %d\n" % (i, i * i) for i in range(600_000))),
        }
        refs = {
            key: f"{repository}:unit-{key}@{store.push_unit('copied', f'unit-{key}', layer)}"
            for key, layer in units.items()
        }
        own = {layer.digest: f"unit {key}'s own blob" for key, layer in units.items()}
        base = f"{standin_registry}/rocm-standin:bookworm-slim"
        own |= {
            d["digest"]: "the base's own blob"
            for d in _layers_of(standin_registry, "rocm-standin", "bookworm-slim")
        }
        context = work / "context"
        context.mkdir()
        rows = []
        for kind in ("containerd", "classic"):
            engine = Engine(work / kind, logs, namespace=f"bake-bench-copied-{kind}")
            engine.start(features={"containerd-snapshotter": kind == "containerd"})
            try:
                for s, (shape, text) in enumerate(SHAPES.items()):
                    (context / "Dockerfile").write_text(text.format(base=base, u=refs["U"], z=refs["Z"]))
                    for o, (output, spec) in enumerate(OUTPUTS.items()):
                        tag = f"{kind}-{s}-{o}"
                        _build_and_push(engine, context, f"{repository}:{tag}", spec, logs / "copied.log")
                        found = [
                            {"media_type": d["mediaType"], "blob": own.get(d["digest"], "new")}
                            for d in _layers_of(store.host, "copied", tag)
                        ]
                        rows.append({"store": kind, "shape": shape, "output": output, "layers": found})
                        log(f"copied units: {kind}, {shape}, {output}: {', '.join(map(_named, found))}")
            finally:
                engine.stop()
        return {"units": {key: layer.media_type for key, layer in units.items()}, "rows": rows}
    finally:
        store.stop()


def _named(layer: dict) -> str:
    """``unit U's own blob: oci tar``, ``new: docker tar.gzip``."""
    short = layer["media_type"].replace(layers.TAR[:-3], "oci ")
    return f"{layer['blob']}: {short.replace('application/vnd.docker.image.rootfs.diff.', 'docker ')}"


def copied_table(found: dict) -> str:
    """A Markdown table: one row per store, shape and output; each layer's blob and compression."""
    lines = ["| store | Dockerfile | pushed by | layers (blob: media type) |", "|---|---|---|---|"]
    for row in found["rows"]:
        seen = "; ".join(map(_named, row["layers"]))
        lines.append(f"| {row['store']} | {row['shape']} | {row['output']} | {seen} |")
    return "\n".join(lines)

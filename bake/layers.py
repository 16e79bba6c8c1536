"""Asset units and their layers: one content-addressed ``FROM scratch`` image per unit, plus an index.

A **unit** is one asset; or a Hub repository at a commit (the blobs of that entry); or the assets
that share a manifest ``layer = "NAME"`` key. Its image holds one layer: the unit's files at their
in-image paths under ``/opt/bake/assets``, with the directories above them. The layer's bytes
depend on that unit alone, so it is byte-identical whatever else the manifest holds, and its tag
(``unit-<name>-<key>``, the key the sha256 of the unit's paths, sizes and sha256s) is known from
the manifest before anything is fetched.

The **index** is everything else the sealed tree holds: ``bake.lock.json``, ``SHA256SUMS``,
``bake.serve``, ``bake.offline``, the alias links, the Hub's snapshot links, refs and listings,
and every directory. It is the one layer every manifest change touches.

Layers are written here, byte for byte (sorted members, owner 0:0, the tree's own modes and fixed
mtimes), and compressed by how well the unit compresses: a sample that zlib cannot shrink by
``STORE_ABOVE`` is stored uncompressed, anything else is zstd (gzip where no ``zstd`` is on PATH).
A cold pull then runs at the disk's or link's rate, not at one core's gzip rate.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import platform
import re
import shutil
import subprocess
import tarfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.asset import Asset
from bake.errors import BuildError, UsageError
from bake.hashes import sha256_file

ROOT = "opt/bake/assets"
UNIT_PREFIX = "unit-"
# A unit tag is unit-<name>-<64 hex>, and a tag holds at most 128 characters.
MAX_NAME = 128 - len(UNIT_PREFIX) - 1 - 64
UNIT_TAG = re.compile(rf"{UNIT_PREFIX}(?P<name>[A-Za-z0-9_.-]+)-(?P<key>[0-9a-f]{{64}})")
# An image of at most this many layers runs a container on overlay2, the Docker engine's storage driver:
# measured on this engine (26.1.5), 127 run and 128 fail "max depth exceeded", since a container
# stacks two layers of its own on the image's (BuildKit still builds 129). The base's layers count.
ENGINE_LAYERS = 127
# The layers a selection may make before bake warns: half of ENGINE_LAYERS, so the base image (a
# ROCm image has dozens) and the image's own steps keep the other half.
LAYER_BUDGET = 64
# Store a layer uncompressed when a sample compresses to more than this share of its size.
STORE_ABOVE = 0.95
SAMPLE_CHUNKS, SAMPLE_CHUNK = 16, 1 << 20

TAR = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


@dataclass(frozen=True)
class Unit:
    """One unit: its name (in its tag), its key (sha256 of its entries) and its assets' paths."""

    name: str
    key: str
    paths: tuple[str, ...]

    @property
    def tag(self) -> str:
        return f"{UNIT_PREFIX}{self.name}-{self.key}"


def _short(name: str) -> str:
    """A name that fits in a tag: long ones keep their start and gain a hash of the whole."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 9]}.{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def unit_name(asset: Asset) -> str:
    """The unit an asset belongs to: ``layer.NAME``, ``hub.<repo folder>.<commit 12>``, or ``asset.NAME``."""
    if asset.layer:
        return f"layer.{asset.layer}"
    if asset.hub is not None and asset.hub.uses:
        return _short(f"hub.{asset.hub.folder}.{asset.hub.uses[0][0].commit[:12]}")
    return _short(f"asset.{asset.name}")


def units_of(assets: Iterable[Asset]) -> tuple[Unit, ...]:
    """Return the selection's units in manifest order (each where its first asset is)."""
    members: dict[str, list[Asset]] = {}
    for asset in assets:
        members.setdefault(unit_name(asset), []).append(asset)
    units = []
    for name, held in members.items():
        entries = sorted(({"path": a.path, "sha256": a.sha256, "size": a.size} for a in held), key=str)
        key = hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        units.append(Unit(name, key, tuple(sorted(a.path for a in held))))
    return tuple(units)


def layer_count(units: Sequence[Unit]) -> int:
    """The image layers a selection of ``units`` makes: one per unit, and the index's."""
    return len(units) + 1


def check_layer_budget(units: Sequence[Unit]) -> str | None:
    """Return a warning when ``units`` make more than LAYER_BUDGET layers; None when they fit.

    Raises UsageError when they make more than ENGINE_LAYERS less one (the least a base adds), so
    that no image holding them could run: ``manifest check``, ``publish`` and ``pin`` say so before
    anything is built, not the engine at build or run time ("max depth exceeded").
    """
    count = layer_count(units)
    if count <= LAYER_BUDGET:
        return None
    singles = [u.paths[0].partition("/")[0] for u in units if u.name.startswith("asset.")]
    top = max(set(singles), key=singles.count, default=None)
    hint = (
        f' (for example the {singles.count(top)} assets under {top}/ could all take layer = "{top}")'
        if top is not None and singles.count(top) > 1
        else ""
    )
    what = (
        f"the selection makes {count} image layers ({len(units)} units and the index); an image runs on "
        f"at most {ENGINE_LAYERS} layers under overlay2, the base image's own included"
    )
    todo = (
        f'give small assets that change together one unit with layer = "NAME" in their [[asset]] '
        f'tables{hint}, or select fewer with --group (docs/building.md, "Layer limits")'
    )
    if count > ENGINE_LAYERS - 1:
        raise UsageError(f"{what}, so no image holding them could run: {todo}")
    return f"warning: {what}, and bake keeps to {LAYER_BUDGET} to leave the base room: {todo}"


@dataclass(frozen=True)
class Blob:
    """A layer the registry holds already: its media type, blob digest, size and diff ID."""

    media_type: str
    digest: str
    size: int
    diff_id: str

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layer:
    """A layer blob written to disk: its media type, digest, size and diff ID, and what it saved."""

    path: Path
    media_type: str
    digest: str
    size: int
    diff_id: str
    tar_size: int

    @property
    def compression(self) -> str:
        return {TAR: "none"}.get(self.media_type, self.media_type.rpartition("+")[2])

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def _normal(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """A copy of ``member`` with nothing but its name, type, mode, mtime, link and size."""
    info = tarfile.TarInfo(member.name.removeprefix("./").rstrip("/"))
    info.type, info.mode, info.mtime = member.type, member.mode, int(member.mtime)
    info.linkname, info.size = member.linkname, member.size if member.isreg() else 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def split(tree: Path, units: Sequence[Unit], out: Path) -> tuple[dict[str, Path], Path]:
    """Split the sealed tree's tar (the ``assets`` stage) into one tar per unit and the index's.

    Returns {unit name: tar path} and the index's tar path. Raises BuildError when an asset path
    of a unit is not a file in the tree.
    """
    owner = {f"{ROOT}/{path}": unit.name for unit in units for path in unit.paths}
    with tarfile.open(tree) as src:
        members = {_normal(m).name: m for m in src.getmembers()}
        missing = sorted(name for name in owner if name not in members)
        if missing:
            raise BuildError(
                f"the sealed tree lacks {len(missing)} asset file(s) its units name, first {missing[0]!r}; "
                "the assets stage did not build what the manifest selects: rebuild it"
            )
        dirs = sorted(name for name, m in members.items() if m.isdir())
        index_names = dirs + sorted(n for n, m in members.items() if not m.isdir() and n not in owner)
        index = _write(src, members, index_names, out / "index.tar")
        layers = {}
        for unit in units:
            files = [f"{ROOT}/{path}" for path in unit.paths]
            parents = {p for name in files for p in _parents(name)}
            names = sorted(p for p in parents if p in members) + files
            layers[unit.name] = _write(src, members, names, out / f"{unit.name}.tar")
    return layers, index


def _parents(name: str) -> Iterable[str]:
    parts = name.split("/")
    return ("/".join(parts[:i]) for i in range(1, len(parts)))


def _write(src: tarfile.TarFile, members: dict[str, tarfile.TarInfo], names: list[str], path: Path) -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in names:
            member = members[name]
            info = _normal(member)
            if member.islnk():
                # A hard link into another unit's file would tie the two layers: store the bytes.
                target = src._find_link_target(member)
                info.type, info.linkname, info.size = tarfile.REGTYPE, "", target.size
            data = src.extractfile(member) if info.isreg() else None
            tar.addfile(info, data)
    return path


def _sample_ratio(path: Path) -> float:
    """How far zlib (level 1) shrinks evenly spaced 1 MiB pieces of the file: compressed / raw."""
    size = path.stat().st_size
    raw = packed = 0
    with path.open("rb") as f:
        for i in range(SAMPLE_CHUNKS):
            f.seek(size * i // SAMPLE_CHUNKS)
            chunk = f.read(SAMPLE_CHUNK)
            raw += len(chunk)
            packed += len(zlib.compress(chunk, 1))
    return packed / raw if raw else 1.0


def digest_of(path: Path) -> str:
    """The ``sha256:…`` digest of a file."""
    return f"sha256:{sha256_file(path)}"


def compress(tar: Path) -> Layer:
    """Return the layer blob for ``tar``: stored as is, zstd, or gzip (see the module's rule)."""
    diff_id, tar_size = digest_of(tar), tar.stat().st_size
    if _sample_ratio(tar) > STORE_ABOVE:  # the blob is the tar itself: hashed once, above
        return Layer(tar, TAR, diff_id, tar_size, diff_id, tar_size)
    if shutil.which("zstd"):
        blob, media_type = tar.with_suffix(".tar.zst"), f"{TAR}+zstd"
        # zstd's output is the same for the same input and level, whatever the thread count.
        proc = subprocess.run(
            ["zstd", "-q", "-f", "-T0", "-3", "--no-progress", str(tar), "-o", str(blob)],
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            raise BuildError(f"zstd failed on {tar}: {proc.stderr.decode(errors='replace').strip()}")
    else:
        blob, media_type = tar.with_suffix(".tar.gz"), f"{TAR}+gzip"
        with tar.open("rb") as f, blob.open("wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as z:
            shutil.copyfileobj(f, z, 1 << 20)
    return Layer(blob, media_type, digest_of(blob), blob.stat().st_size, diff_id, tar_size)


def image(blobs: Sequence[Layer | Blob]) -> tuple[bytes, bytes]:
    """Return the canonical config and manifest bytes of a ``FROM scratch`` image of these layers."""
    config = _canonical(
        {
            "architecture": _ARCH.get(platform.machine(), platform.machine()),
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in blobs]},
        }
    )
    manifest = _canonical(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": CONFIG_TYPE,
                "digest": f"sha256:{hashlib.sha256(config).hexdigest()}",
                "size": len(config),
            },
            "layers": [layer.descriptor() for layer in blobs],
        }
    )
    return config, manifest


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

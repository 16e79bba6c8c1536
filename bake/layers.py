"""Asset units and their layers: one content-addressed ``FROM scratch`` image per unit, plus an index.

A **unit** is one asset; or the assets that share a manifest ``layer = "NAME"`` key; or, for the
Hub, one of two kinds:

- a **Hub file at or above the threshold** (``HUB_FILE_THRESHOLD``, or the manifest's ``[units]
  hub_file_threshold``) is a unit of its own, keyed by its content: its sha256 and its blob paths
  (``hub/<repo folder>/blobs/<etag>``). The same bytes under two commits of one repository are
  one path, so one unit; under two repositories, two paths of one unit, whose layer carries the
  bytes once and hard-links the second path to the first;
- the **repository's own unit** (``hub.<repo folder>``) holds the rest of that repository: its
  small blobs, and the snapshot links, refs and tree listings seal writes for each of its commits.

Its image holds one layer: the unit's paths under ``/opt/bake/assets``, with the directories above
them. The layer's bytes depend on that unit alone, so it is byte-identical whatever else the
manifest holds, and its tag (``unit-<name>-<key>``, the key the sha256 of the unit's paths and
what each holds) is known from the manifest before anything is fetched.

The **index** is everything else the sealed tree holds: ``bake.lock.json``, ``SHA256SUMS``,
``bake.serve``, ``bake.offline``, the consumers' alias links and every directory. It is the one
layer every manifest change touches.

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
from bake.byte_sizes import shown_size
from bake.errors import BuildError, ManifestError
from bake.hashes import sha256_file
from bake.hub import layout as hub_layout
from bake.manifest import HUB_FILE_THRESHOLD, as_manifest

ROOT = "opt/bake/assets"
UNIT_PREFIX = "unit-"
# A unit tag is unit-<name>-<64 hex>, and a tag holds at most 128 characters.
MAX_NAME = 128 - len(UNIT_PREFIX) - 1 - 64
UNIT_TAG = re.compile(rf"{UNIT_PREFIX}(?P<name>[A-Za-z0-9_.-]+)-(?P<key>[0-9a-f]{{64}})")
# An image of at most this many layers runs a container on overlay2, the Docker engine's storage driver:
# measured on this engine (26.1.5), 127 run and 128 fail "max depth exceeded", since a container
# stacks two layers of its own on the image's (BuildKit still builds 129). The base's layers count.
ENGINE_LAYERS = 127
# The layers a selection's block makes at most: half of ENGINE_LAYERS, so the base image (a ROCm
# image has dozens) and the image's own steps keep the other half. Past it, bake packs (fit_budget).
LAYER_BUDGET = 64
# The unit the smallest units become, together, when a selection makes more layers than the budget.
PACK = "pack"
# Store a layer uncompressed when a sample compresses to more than this share of its size.
STORE_ABOVE = 0.95
SAMPLE_CHUNKS, SAMPLE_CHUNK = 16, 1 << 20

TAR = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


@dataclass(frozen=True)
class Unit:
    """One unit: its name (in its tag), its key (sha256 of its entries) and the paths its layer holds.

    ``paths`` are relative to the asset root: assets, and the Hub's snapshot links, refs and tree
    listings. ``hardlinks`` pairs a path with the path whose bytes it shares (a Hub file in two
    repositories): the layer holds those bytes once. ``size`` is the bytes the layer carries, None
    when a file's size is not in the manifest.
    """

    name: str
    key: str
    paths: tuple[str, ...]
    hardlinks: tuple[tuple[str, str], ...] = ()
    size: int | None = None

    @property
    def tag(self) -> str:
        return f"{UNIT_PREFIX}{self.name}-{self.key}"


def _short(name: str) -> str:
    """A name that fits in a tag: long ones keep their start and gain a hash of the whole."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 9]}.{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def repository_unit(folder: str) -> str:
    """The name of a Hub repository's own unit: ``hub.<repo folder>``."""
    return _short(f"hub.{folder}")


def unit_name(asset: Asset, threshold: int = HUB_FILE_THRESHOLD) -> str:
    """The unit an asset belongs to: ``layer.NAME``, ``hub.blob.<sha256 16>`` (a Hub file at or above
    ``threshold``), its repository's ``hub.<repo folder>``, or ``asset.NAME``."""
    if asset.layer:
        return f"layer.{asset.layer}"
    if asset.hub is not None:
        if asset.size is not None and asset.size >= threshold:
            return f"hub.blob.{asset.sha256[:16]}"
        return repository_unit(asset.hub.folder)
    return _short(f"asset.{asset.name}")


def units_of(assets: Iterable[Asset]) -> tuple[Unit, ...]:
    """Return the selection's units: each asset's and ``layer`` group's where its first asset is, in
    manifest order; then the Hub files that are units of their own; then each Hub repository's own
    unit. The small units that a bump changes come last, so an agent on the classic image store,
    which pulls again every layer above a changed one, pulls no large file again for a bump."""
    manifest = as_manifest(assets)
    threshold = manifest.hub_file_threshold
    members: dict[str, dict[str, dict]] = {}
    repositories: dict[str, dict[str, dict]] = {}
    by_content: dict[str, str] = {}  # a Hub file's unit -> the sha256 it holds
    for asset in manifest:
        name = unit_name(asset, threshold)
        record = {"sha256": asset.sha256, "size": asset.size}
        if asset.hub is not None and name == repository_unit(asset.hub.folder):
            repositories.setdefault(name, {})[asset.path] = record
            continue
        if asset.hub is not None and by_content.setdefault(name, asset.sha256) != asset.sha256:
            # Its layer hard-links every path to the first: one name must never hold two contents.
            raise ManifestError(
                f"asset {asset.name!r}: sha256 {asset.sha256} and {by_content[name]} (another Hub file) "
                f"share the first 16 hex digits that name unit {name}; two files made to collide so "
                "are not what a manifest pins by accident: check where both repositories came from"
            )
        members.setdefault(name, {})[asset.path] = record
    for entry in manifest.hub_entries:
        repositories.setdefault(repository_unit(entry.folder), {}).update(hub_layout.unit_records(entry))
    return tuple(_unit(name, held, name in by_content) for name, held in {**members, **repositories}.items())


def _unit(name: str, held: dict[str, dict], by_content: bool) -> Unit:
    """The unit ``name`` holding ``held`` (path -> what it holds); ``by_content``: its files hold one
    content, stored once (the first path) and hard-linked at the others."""
    entries = sorted(({"path": path, **record} for path, record in held.items()), key=str)
    key = hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    paths = tuple(sorted(held))
    hardlinks = tuple((path, paths[0]) for path in paths[1:]) if by_content else ()
    sizes = [held[path].get("size", 0) for path in paths[: 1 if by_content else None]]
    size = None if None in sizes else sum(sizes)
    return Unit(name, key, paths, hardlinks, size)


def layer_count(units: Sequence[Unit]) -> int:
    """The image layers a selection of ``units`` makes: one per unit, and the index's."""
    return len(units) + 1


def packed(units: Sequence[Unit], budget: int) -> tuple[tuple[Unit, ...], tuple[Unit, ...]]:
    """Return ``units`` as a block of at most ``budget`` layers (layer_count), and the units packed
    together to get there (none when they fit).

    Past the budget, the smallest units (by the bytes they carry; a unit of unknown size counts as
    the largest; ties by name) become one unit, ``pack``, last among the units: the same units
    always give the same block. Its key names its members' names and keys, so it changes with any.
    """
    over = layer_count(units) - budget
    if over <= 0:
        return tuple(units), ()
    chosen = sorted(units, key=lambda u: (u.size is None, u.size or 0, u.name))[: over + 1]
    members = sorted([u.name, u.key] for u in chosen)
    key = hashlib.sha256(json.dumps(members, separators=(",", ":")).encode()).hexdigest()
    sizes = [u.size for u in chosen]
    pack = Unit(
        PACK,
        key,
        tuple(sorted(path for u in chosen for path in u.paths)),
        tuple(sorted(link for u in chosen for link in u.hardlinks)),
        None if None in sizes else sum(s or 0 for s in sizes),
    )
    left = tuple(u for u in units if u not in chosen)
    return (*left, pack), tuple(chosen)


def fit_budget(units: Sequence[Unit]) -> tuple[tuple[Unit, ...], str | None]:
    """Return the block of ``units``: themselves when they make at most LAYER_BUDGET layers
    (layer_count), else with the smallest packed into one (``packed``); and what was packed, to say
    (None when nothing was). ``manifest check``, ``publish`` and ``pin`` all take this block, so a
    selection never makes more layers than the budget, which leaves the base its room.
    """
    block, chosen = packed(units, LAYER_BUDGET)
    if not chosen:
        return block, None
    sizes = [u.size for u in chosen]
    carried = "of unknown size" if None in sizes else shown_size(sum(s or 0 for s in sizes))
    singles = [u.paths[0].partition("/")[0] for u in units if u.name.startswith("asset.")]
    top = max(set(singles), key=singles.count, default=None)
    hint = (
        f' (for example the {singles.count(top)} assets under {top}/ could all take layer = "{top}")'
        if top is not None and singles.count(top) > 1
        else ""
    )
    note = (
        f"the selection makes {layer_count(units)} image layers ({len(units)} units and the index), and "
        f"bake keeps to {LAYER_BUDGET} so the base image keeps room (an image runs on at most "
        f"{ENGINE_LAYERS} under overlay2): the {len(chosen)} smallest units ({carried}) are packed into "
        f"one, {PACK}, which a change to any of them ships whole; to choose the groups yourself, give "
        f'small assets that change together layer = "NAME"{hint}, or select fewer with --group '
        '(docs/building.md, "Layer limits")'
    )
    return block, note


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

    Returns {unit name: tar path} and the index's tar path. Raises BuildError when a path of a
    unit is not in the tree.
    """
    owner = {f"{ROOT}/{path}": unit.name for unit in units for path in unit.paths}
    with tarfile.open(tree) as src:
        members = {_normal(m).name: m for m in src.getmembers()}
        missing = sorted(name for name in owner if name not in members)
        if missing:
            raise BuildError(
                f"the sealed tree lacks {len(missing)} path(s) its units name, first {missing[0]!r}; "
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
            same = {f"{ROOT}/{path}": f"{ROOT}/{first}" for path, first in unit.hardlinks}
            layers[unit.name] = _write(src, members, names, out / f"{unit.name}.tar", same)
    return layers, index


def _parents(name: str) -> Iterable[str]:
    parts = name.split("/")
    return ("/".join(parts[:i]) for i in range(1, len(parts)))


def _write(
    src: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    names: list[str],
    path: Path,
    same: dict[str, str] | None = None,
) -> Path:
    """Write ``names`` from ``src`` to the tar ``path``; each name in ``same`` as a hard link to the
    name it maps to (written before it: the two hold the same verified bytes)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in names:
            member = members[name]
            info = _normal(member)
            if same and name in same:
                info.type, info.linkname, info.size = tarfile.LNKTYPE, same[name], 0
            elif member.islnk():
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

"""Signing fixtures for tests: cosign key pairs made in the test, and small asset images pushed by hand.

``push_selection`` pushes a selection's unit images, index and whole to a registry through bake's
own registry client and layer writer (bake.registry, bake.layers), as ``bake publish`` lays them
out, without a build: the signing tests need real images in a real registry, not a fetch. Its
fixtures (``repository``, ``keys``, ``published``, ``image_cleanup``) are shared through
tests/conftest.py with tests/test_signing.py, tests/test_cosign.py and tests/test_signed_image.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from bake import layers, registry, served
from bake.asset import Asset
from bake.cosign import Cosign
from bake.index import lock_document
from bake.manifest import manifest_digest
from bake.publish import INDEX_PREFIX, Block, Published
from tests.image import fail_or_skip
from tests.registries import REGISTRY, remove_images_named

# The selection the signing tests publish: three units, one of two files.
UNITS = {
    "asset.vocab": {"data/vocab.bin": b"vocab bytes\n" * 100},
    "layer.model": {"model/a.bin": b"\x00\x01" * 4096, "model/b.bin": b"weights" * 500},
    "asset.checkpoint": {"data/checkpoint.onnx": b"onnx" * 1000},
}


def need_cosign() -> None:
    """Skip (fail under CI=true) where cosign is not installed: scripts/toolchain.sh installs it."""
    if shutil.which("cosign") is None:
        fail_or_skip("cosign is not installed; run `scripts/toolchain.sh up` (it installs trixie's cosign)")


def key_pair(directory: Path, name: str = "cosign", password: str = "") -> tuple[str, str]:
    """Make a cosign key pair in ``directory``; return the private and public key's paths."""
    need_cosign()
    subprocess.run(
        ["cosign", "generate-key-pair", "--output-key-prefix", name],
        cwd=directory, env={**os.environ, "COSIGN_PASSWORD": password},
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return str(directory / f"{name}.key"), str(directory / f"{name}.pub")


def asset_of(path: str, data: bytes) -> Asset:
    """The manifest entry of a file: named after its path, sized, served by one (unreachable) URL."""
    sha = hashlib.sha256(data).hexdigest()
    return Asset(path.replace("/", "_"), path, sha, (f"https://assets.invalid/{path}",), size=len(data))


def tar_of(files: Mapping[str, bytes]) -> bytes:
    """A layer tar of ``files`` (path under the asset root -> bytes), read-only, as a unit holds them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{layers.ROOT}/{path}")
            info.size, info.mode = len(data), 0o444
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def push_image(repository: str, tag: str, tars: list[bytes]) -> str:
    """Push a ``FROM scratch`` image of these layer tars under ``tag``; return its manifest digest."""
    target = registry.Registry(repository)
    with tempfile.TemporaryDirectory(prefix="bake-signed-") as tmp:
        blobs = []
        for i, data in enumerate(tars):
            path = Path(tmp) / f"{i}.tar"
            path.write_bytes(data)
            blobs.append(layers.compress(path))
        config, manifest = layers.image(blobs)
        for layer in blobs:
            target.push_blob(layer.digest, path=layer.path)
        target.push_blob(f"sha256:{hashlib.sha256(config).hexdigest()}", data=config)
        return target.put_manifest(tag, manifest, layers.MANIFEST_TYPE)


def push_selection(repository: str, units: Mapping[str, Mapping[str, bytes]]) -> tuple[Block, list[Asset]]:
    """Push one unit image per entry of ``units`` (name -> its files), the index and the whole.

    Returns what ``bake publish`` would: the Block, and the selected assets.
    """
    assets = [asset_of(path, data) for files in units.values() for path, data in files.items()]
    digest = manifest_digest(assets)
    lock = lock_document(assets, {a.path: a.size for a in assets})
    index_tar = tar_of({"bake.lock.json": json.dumps(lock, indent=2, sort_keys=True).encode()})
    published, tars = [], []
    for name, files in units.items():
        # One unit of all its files, whatever their names (units_of keys it as publish does).
        (unit,) = layers.units_of([replace(asset_of(p, d), layer="unit") for p, d in files.items()])
        unit = layers.Unit(name, unit.key, unit.paths)
        tars.append(tar_of(files))
        published.append(
            (unit, Published(f"{repository}:{unit.tag}", push_image(repository, unit.tag, tars[-1:])))
        )
    index_ref = f"{repository}:{INDEX_PREFIX}{digest}"
    index = Published(index_ref, push_image(repository, index_ref.rpartition(":")[2], [index_tar]))
    whole = Published(f"{repository}:{digest}", push_image(repository, digest, [*tars, index_tar]))
    return Block(tuple(published), index, whole), assets


def repush(published: Published, files: Mapping[str, bytes]) -> Published:
    """Push other files under the same tag (a unit replaced behind its name); return what it serves now."""
    repository, _, tag = published.ref.rpartition(":")
    return Published(published.ref, push_image(repository, tag, [tar_of(files)]))


def replace_unit(block: Block, position: int, files: Mapping[str, bytes]) -> tuple[Published, Published]:
    """Push other files under unit ``position``'s tag, and a whole image naming that layer in its place:
    what someone who can push would do so that the selection stays consistent. Returns the unit's
    and the whole's new Published."""
    unit = repush(block.units[position][1], files)
    repository, _, tag = block.whole.ref.rpartition(":")
    target = registry.Registry(repository)
    whole = served.read(target, [block.whole.ref])[block.whole.ref]
    (new,) = served.read(target, [unit.ref])[unit.ref].layers
    blobs = list(whole.layers)
    blobs[position] = new
    config, manifest = layers.image(blobs)
    target.push_blob(f"sha256:{hashlib.sha256(config).hexdigest()}", data=config)
    return unit, Published(block.whole.ref, target.put_manifest(tag, manifest, layers.MANIFEST_TYPE))


@pytest.fixture
def repository() -> str:
    return f"{REGISTRY}/sign-test/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A key pair made for the test, with an empty password, which COSIGN_PASSWORD gives."""
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    return key_pair(tmp_path)


@pytest.fixture
def published(repository: str) -> tuple[Block, list[Asset]]:
    return push_selection(repository, UNITS)


@pytest.fixture
def image_cleanup(repository: str) -> Iterator[None]:
    """What `bake verify --image` and bake.testing pull into the engine goes at the end."""
    yield
    remove_images_named(repository)


def signer(key: str) -> Cosign:
    """cosign signing with a private key file, or verifying with a public one; no transparency log."""
    return Cosign.signer(key, tlog=False) if key.endswith(".key") else Cosign(key, tlog=False)

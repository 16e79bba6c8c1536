"""The asset layer is reproducible: same diff-ID after a --no-cache rebuild and on another base.

The asset layer is the one `COPY --link --from=assets / /` adds: the first layer of the
image that its base image does not have. These are the suite's only builds of the image.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from . import ALIAS_LINKS, ASSET_ROOT, ASSET_SUBDIRS, INDEX_NAMES, MANIFEST, VOCAB_ASSET, bake_image, docker

pytestmark = pytest.mark.docker

BASE_LABEL = "org.opencontainers.image.base.name"
ALT_BASE = os.environ.get("BAKE_STANDIN_BASE_ALT", "local/rocm-standin:bookworm-slim")
SOURCE_DATE_EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))

ROOT = ASSET_ROOT.lstrip("/")
ASSET_DIRS = sorted([ROOT, *(f"{ROOT}/{d}" for d in ASSET_SUBDIRS)])
ASSET_FILES = sorted([f"{ROOT}/{a.path}" for a in MANIFEST] + [f"{ROOT}/{name}" for name in INDEX_NAMES])

ENCODING_LINK = f"{ROOT}/tiktoken/o200k_base.tiktoken"
LAYER_ENTRIES = ["opt", "opt/bake", *ASSET_DIRS, *ASSET_FILES, *(f"{ROOT}/{link}" for link in ALIAS_LINKS)]


def inspect(ref: str) -> dict:
    return json.loads(docker("image", "inspect", ref).stdout)[0]


def asset_layer(ref: str) -> tuple[int, str]:
    """Return the index and diff-ID of the first layer of ``ref`` that its base image lacks."""
    config = inspect(ref)
    base_layers = set(inspect(config["Config"]["Labels"][BASE_LABEL])["RootFS"]["Layers"])
    return next((i, d) for i, d in enumerate(config["RootFS"]["Layers"]) if d not in base_layers)


@pytest.fixture(scope="module")
def base(image_config: dict) -> str:
    return image_config["Config"]["Labels"][BASE_LABEL]


@pytest.fixture(scope="module")
def no_cache_rebuild(image: str, base: str) -> Iterator[str]:
    tag = f"bake/rocm-test:no-cache-{uuid.uuid4().hex[:8]}"
    # A private cache dir bypasses the cache mount, so the bytes really cross the
    # network again, over one connection this time: the layer must not care how.
    fetch_args = "--no-origin --connections 1 --cache-dir /tmp/bake-uncached"
    bake_image(tag, "--no-cache", BASE_IMAGE=base, BAKE_FETCH_ARGS=fetch_args)
    yield tag
    docker("rmi", tag, check=False)


@pytest.fixture(scope="module")
def other_base_build(image: str, base: str) -> Iterator[str]:
    if base == ALT_BASE:
        pytest.fail(f"the image under test is already built on {ALT_BASE}; no other stand-in base to compare")
    tag = f"bake/rocm-test:other-base-{uuid.uuid4().hex[:8]}"
    bake_image(tag, BASE_IMAGE=ALT_BASE)
    yield tag
    docker("rmi", tag, check=False)


def test_asset_layer_directly_follows_the_base(image: str, base: str) -> None:
    index, _ = asset_layer(image)
    assert inspect(image)["RootFS"]["Layers"][:index] == inspect(base)["RootFS"]["Layers"]


def test_no_cache_rebuild_has_the_same_asset_layer(image: str, no_cache_rebuild: str) -> None:
    assert asset_layer(no_cache_rebuild)[1] == asset_layer(image)[1]


def test_other_base_build_really_has_another_base(image: str, other_base_build: str) -> None:
    assert inspect(other_base_build)["RootFS"]["Layers"][0] != inspect(image)["RootFS"]["Layers"][0]


def test_other_base_build_has_the_same_asset_layer(image: str, other_base_build: str) -> None:
    assert asset_layer(other_base_build)[1] == asset_layer(image)[1]


@pytest.fixture(scope="module")
def layer_tar(image: str, image_archive: Path) -> dict[str, tarfile.TarInfo]:
    """The asset layer's tar entries by normalised name, taken from ``docker save``."""
    index, diff_id = asset_layer(image)
    with tarfile.open(image_archive) as saved:
        (manifest,) = json.load(saved.extractfile("manifest.json"))
        data = saved.extractfile(manifest["Layers"][index]).read()
    assert f"sha256:{hashlib.sha256(data).hexdigest()}" == diff_id  # the right blob, uncompressed
    with tarfile.open(fileobj=io.BytesIO(data)) as layer:
        return {m.name.removeprefix("./").rstrip("/"): m for m in layer.getmembers()}


def test_layer_holds_only_the_asset_tree(layer_tar: dict[str, tarfile.TarInfo]) -> None:
    assert sorted(layer_tar) == sorted(LAYER_ENTRIES)


@pytest.mark.parametrize("name", LAYER_ENTRIES)
def test_layer_entry_has_the_fixed_mtime(layer_tar: dict[str, tarfile.TarInfo], name: str) -> None:
    assert layer_tar[name].mtime == SOURCE_DATE_EPOCH


@pytest.mark.parametrize("name", LAYER_ENTRIES)
def test_layer_entry_is_owned_by_root(layer_tar: dict[str, tarfile.TarInfo], name: str) -> None:
    assert (layer_tar[name].uid, layer_tar[name].gid) == (0, 0)


@pytest.mark.parametrize("name", ASSET_DIRS + ASSET_FILES)
def test_layer_entry_mode(layer_tar: dict[str, tarfile.TarInfo], name: str) -> None:
    assert layer_tar[name].mode == (0o555 if name in ASSET_DIRS else 0o444)


def test_layer_link_is_relative(layer_tar: dict[str, tarfile.TarInfo]) -> None:
    assert layer_tar[ENCODING_LINK].issym()
    assert layer_tar[ENCODING_LINK].linkname == PurePosixPath(VOCAB_ASSET.path).name

"""The layer budget: the largest block the budget allows builds on this engine, and its tree is whole.

A manifest of more small assets than the budget has layers (each asset a unit of its own) is published
to the toolchain's registry. bake packs its smallest units into one, so the block is exactly the
budget's layers; `bake pin` writes it into a Dockerfile on the stand-in base, which builds on this
engine (overlay2, where an image of too many layers fails "max depth exceeded"), and a container of it
checks every baked file against SHA256SUMS.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake import layers
from tests.mirror import Mirror
from tests.registries import REGISTRY, remove_images_named

from . import REPO, docker

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

RUN = f"hubunits-budget-{uuid.uuid4().hex[:10]}"
STANDIN = "local/rocm-standin:bookworm"
# More units than the budget has layers: bake packs the smallest (the last ones) to fit.
ASSETS = layers.LAYER_BUDGET + 16


def manifest(mirror: Mirror) -> str:
    """ASSETS small assets, each a unit of its own, the last ones the smallest; served by ``mirror``."""
    entries = []
    for i in range(ASSETS):
        data = f"asset {i}\n".encode() * (ASSETS - i)
        mirror.add(f"/a{i:03}", data)
        entries.append(
            f'[[asset]]\nname = "a{i:03}"\npath = "data/a{i:03}"\nsize = {len(data)}\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nurls = ["{mirror.url(f"/a{i:03}")}"]\n'
        )
    return "\n".join(entries)


def bake(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FETCH_IMAGE": STANDIN}
    proc = subprocess.run(
        [sys.executable, "-m", "bake", *args], cwd=root, env=env,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.CompletedProcess[str]]]:
    """Publish, pin and build the block; yield the image and what ``bake publish`` printed."""
    root = tmp_path_factory.mktemp("budget")
    repository = f"{REGISTRY}/bake-test/{RUN}"
    image = f"bake/{RUN}:budget"
    with Mirror() as mirror:
        (root / "assets.toml").write_text(manifest(mirror))
        (root / "Dockerfile").write_text(f"FROM {STANDIN}\nCOPY --link --from={repository} / /\n")
        args = ["--manifest", "assets.toml", "--repository", repository]
        published = bake(root, "publish", *args, "--", "--network=host", "--allow=network.host")
    bake(root, "pin", *args, "Dockerfile")
    try:
        docker("buildx", "build", "--provenance=false", "--tag", image, "--load", str(root), timeout=600)
        yield image, published
    finally:
        docker("rmi", image, check=False)
        remove_images_named(RUN)


def test_publish_packs_the_smallest_units_into_one_and_says_so(
    built: tuple[str, subprocess.CompletedProcess[str]],
) -> None:
    _, published = built
    units = [line.split()[1] for line in published.stdout.splitlines() if line.startswith("unit ")]
    assert len(units) + 1 == layers.LAYER_BUDGET and units[-1] == layers.PACK
    assert units[:-1] == [f"asset.a{i:03}" for i in range(len(units) - 1)], "the largest keep their own"
    assert "packed" in published.stderr and str(ASSETS + 1) in published.stderr


def test_the_largest_block_the_budget_allows_builds_here_and_every_file_checks(
    built: tuple[str, subprocess.CompletedProcess[str]],
) -> None:
    image, _ = built
    layers_seen = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", image).stdout)
    assert len(layers_seen) == 1 + layers.LAYER_BUDGET  # the stand-in's one layer, and the block
    check = "cd /opt/bake/assets && sha256sum -c SHA256SUMS"
    proc = docker("run", "--rm", "--network=none", image, "sh", "-c", check, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count(": OK") == ASSETS

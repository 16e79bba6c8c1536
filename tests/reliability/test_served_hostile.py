"""Hostile registries against ``bake/served.py``: a tag that is present is not trusted (round 5, R5-3).

A loopback registry that answers every tag with one image, and the toolchain's real registry with
a unit's tag pre-seeded (or replaced after a publish) with other bytes, are refused with exit 5,
naming the tag, what was expected and what was served; the Dockerfile stays as it was. Asking
takes two requests a tag, counted by a loopback proxy in front of the registry.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bake.assets_image import registry_digest
from bake.errors import BuildError
from bake.publish import selection_of
from tests.baked import FILES, VOCAB_PATH, write_manifest
from tests.registries import (
    REGISTRY,
    CountingProxy,
    OneImageRegistry,
    publish_files,
    push_manifest,
    push_one_layer,
)

from . import NO_ENGINE, bake

pytestmark = pytest.mark.timeout(180)


def repository(kind: str) -> str:
    return f"{REGISTRY}/bake-test/rel-{kind}-{uuid.uuid4().hex[:10]}"


def registry_has(ref: str) -> bool:
    return registry_digest(ref) is not None


# ---- R5-3: a registry that lies ------------------------------------------------------------------


@pytest.mark.parametrize("layers", [0, 1], ids=["an empty image", "a one-layer image"])
def test_pin_refuses_a_registry_that_answers_every_tag_with_one_image(tmp_path: Path, layers: int) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")  # three units
    dockerfile = tmp_path / "Dockerfile"
    with OneImageRegistry(layers) as liar:
        repo = f"{liar.host}/bake-assets"
        text = f"FROM base\nCOPY --link --from={repo} / /\n"
        dockerfile.write_text(text)
        pin = bake(
            "pin", "--manifest", manifest, "--repository", repo, dockerfile, cwd=tmp_path, env=NO_ENGINE
        )
        check = bake("pin", "--check", "--manifest", manifest, "--repository", repo, dockerfile, cwd=tmp_path)
    chosen = selection_of(manifest, repo, [])
    for proc in (pin, check):
        assert proc.returncode == 5, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert all(chosen.unit_ref(unit) in proc.stderr for unit in chosen.units)
        assert f"expected 5 distinct images; served one, {liar.digest}" in proc.stderr
        assert (
            f"{chosen.whole_ref}: expected 4 layers (one per unit, then the index's); served" in proc.stderr
        )
    assert dockerfile.read_text() == text, "the Dockerfile stays untouched"


@pytest.mark.parametrize("seeded", ["an empty image", "other bytes"])
def test_publish_refuses_a_unit_someone_pushed_first(engine: None, tmp_path: Path, seeded: str) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    repo = repository("seeded")
    chosen = selection_of(manifest, repo, ["vllm"])
    unit = chosen.unit_ref(chosen.units[0])
    if seeded == "an empty image":
        served = push_manifest(unit)
    else:
        served = push_one_layer(unit, VOCAB_PATH, b"not the vocab the manifest pins\n")
    with pytest.raises(BuildError) as caught:
        publish_files(manifest, repo, ["vllm"], FILES)
    message = str(caught.value)
    assert caught.value.exit_code == 5
    assert f"{unit}: expected 1 layer, diff ID sha256:" in message and "(the tree bake built)" in message
    assert f"served {served}" in message and "nothing was pushed or pinned" in message
    assert registry_has(chosen.index_ref) is False and registry_has(chosen.whole_ref) is False


def test_pin_refuses_a_unit_replaced_after_it_was_published(engine: None, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    repo = repository("replaced")
    block = publish_files(manifest, repo, [], FILES)
    selection = ["--manifest", manifest, "--repository", repo]
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM base\nCOPY --link --from={repo} / /\n")
    assert bake("pin", *selection, dockerfile, cwd=tmp_path).returncode == 0
    pinned = dockerfile.read_text()
    assert bake("pin", "--check", *selection, dockerfile, cwd=tmp_path).returncode == 0

    unit, published = block.units[1]
    replaced = push_one_layer(published.ref, unit.paths[0], b"other bytes under a unit's tag\n")
    for args in (["--check"], []):
        proc = bake("pin", *args, *selection, dockerfile, cwd=tmp_path)
        assert proc.returncode == 5, proc.stderr
        assert f"{published.ref}: expected 1 layer, diff ID sha256:" in proc.stderr
        assert f"(layer 2 of {block.whole.ref})" in proc.stderr and f"served {replaced}" in proc.stderr
    assert dockerfile.read_text() == pinned, "the Dockerfile stays untouched"


def test_asking_takes_two_requests_a_tag_and_a_push_five_an_image(engine: None, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")  # three units, the index and the whole
    dockerfile = tmp_path / "Dockerfile"
    with CountingProxy(REGISTRY) as proxy:
        repo = f"{proxy.host}/bake-test/rel-count-{uuid.uuid4().hex[:10]}"
        dockerfile.write_text(f"COPY --from={repo} / /\n")
        publish_files(manifest, repo, [], FILES)
        pushed = list(proxy.requests)
        proxy.requests.clear()
        proc = bake("pin", "--check", "--manifest", manifest, "--repository", repo, dockerfile, cwd=tmp_path)
        asked = list(proxy.requests)
    assert proc.returncode == 1 and "stale line" in proc.stderr, proc.stderr
    tags = 3 + 2
    # The first publish: a question a tag; then for each one-layer image its layer and its config
    # (each a mount that opens an upload, then its PUT) and its manifest; then the whole's config
    # and manifest, its layers being in the repository by then.
    assert len(pushed) == tags + 4 * 5 + 3, "\n".join(pushed)
    # pin: the manifest and the config of each tag, nothing else.
    assert [r.split(" ")[0] for r in asked] == ["GET"] * 2 * tags, "\n".join(asked)

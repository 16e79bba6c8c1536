"""The `assets` target on its own: exported as plain files, and narrowed by ASSET_GROUPS."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from . import ASSET_ROOT, INDEX_NAMES, MANIFEST, buildx_bake

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def vllm_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Export the assets target for the vllm group into a local directory, as the README shows."""
    out = tmp_path_factory.mktemp("assets-export")
    # The group changes the digest, so the full manifest's ASSET_DIGEST does not apply.
    buildx_bake(
        "--set", f"assets.output=type=local,dest={out}", "assets", ASSET_GROUPS="vllm", ASSET_DIGEST=""
    )
    return out / ASSET_ROOT.lstrip("/")


def test_export_holds_only_the_asset_tree(vllm_export: Path) -> None:
    top = vllm_export.parents[2]
    vllm = [a for a in MANIFEST if "vllm" in a.groups]
    assert sorted(p.relative_to(top).as_posix() for p in top.rglob("*")) == sorted(
        ["opt", "opt/bake", "opt/bake/assets", *[f"opt/bake/assets/{name}" for name in INDEX_NAMES],
         "opt/bake/assets/tiktoken/o200k_base.tiktoken",
         *{f"opt/bake/assets/{a.path.split('/')[0]}" for a in vllm},
         *[f"opt/bake/assets/{a.path}" for a in vllm]]
    )  # fmt: skip


@pytest.mark.parametrize("asset", [a for a in MANIFEST if "vllm" in a.groups], ids=lambda a: a.name)
def test_exported_asset_verifies(vllm_export: Path, asset) -> None:
    assert hashlib.sha256((vllm_export / asset.path).read_bytes()).hexdigest() == asset.sha256


def test_group_left_out_the_checkpoint(vllm_export: Path) -> None:
    assert not (vllm_export / "s3tokenizer").exists()
    assert "s3tokenizer" not in (vllm_export / "SHA256SUMS").read_text()

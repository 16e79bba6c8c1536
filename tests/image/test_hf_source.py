"""An hf:// source in a real build: the fetch stage brings in huggingface_hub only for it.

A loopback server speaks the Hub's resolve endpoint (a 302 to a CDN path) and
refuses requests without the token, which reaches the build only as the
`hf_token` BuildKit secret. HF_ENDPOINT points huggingface_hub at it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import ASSET_ROOT, REPO, buildx_bake, required_env

pytestmark = pytest.mark.docker

DATA = hashlib.sha256(b"hf checkpoint").digest() * 40_000  # 1.25 MiB
REPO_ID = "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"
# pip in the fetch stage reaches PyPI only through this machine's CA (see the brief).
MACHINE_CA = "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture(scope="module")
def hub() -> Iterator[tuple[Mirror, Mirror]]:
    with Mirror() as hub_server, Mirror() as cdn:
        yield hub_server, cdn


@pytest.fixture(scope="module")
def hf_export(hub: tuple[Mirror, Mirror], tmp_path_factory: pytest.TempPathFactory) -> Path:
    hub_server, cdn = hub
    hub_server.add_hub_file(
        REPO_ID, "main", "speech_tokenizer_v3.onnx", DATA, cdn=cdn, token=required_env("BAKE_TEST_HF_TOKEN")
    )
    # The manifest must sit inside the build context; .work/ is git-ignored scratch. The hf://
    # URL is the origin here (HF_ENDPOINT is loopback), so the override's --no-origin is dropped,
    # and a fresh private cache dir keeps an earlier run's cache mount, or its cached RUN, from
    # serving the bytes.
    manifest = REPO / ".work" / "hf-assets.toml"
    manifest.parent.mkdir(exist_ok=True)
    manifest.write_text(
        '[[asset]]\nname = "speech_tokenizer_v3_25hz"\n'
        'path = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"\n'
        f'sha256 = "{hashlib.sha256(DATA).hexdigest()}"\nsize = {len(DATA)}\n'
        f'urls = ["hf://{REPO_ID}@main/speech_tokenizer_v3.onnx"]\n'
    )
    out = tmp_path_factory.mktemp("hf-export")
    buildx_bake(
        f"--allow=fs.read={MACHINE_CA}", "--set", f"assets.output=type=local,dest={out}", "assets",
        ASSET_MANIFEST=".work/hf-assets.toml", ASSET_DIGEST="", ASSET_MIRRORS="",
        BAKE_FETCH_ARGS=f"--cache-dir /tmp/bake-uncached-{uuid.uuid4().hex}",
        HF_ENDPOINT=hub_server.base_url, BAKE_TEST_CA_BUNDLE=MACHINE_CA,
    )  # fmt: skip
    manifest.unlink()
    return out / ASSET_ROOT.lstrip("/")


def test_hf_asset_is_baked_and_verified(hf_export: Path) -> None:
    baked = hf_export / "s3tokenizer/speech_tokenizer_v3_25hz.onnx"
    assert hashlib.sha256(baked.read_bytes()).hexdigest() == hashlib.sha256(DATA).hexdigest()
    assert "s3tokenizer/speech_tokenizer_v3_25hz.onnx" in (hf_export / "SHA256SUMS").read_text()


def test_hf_asset_came_through_the_hub_with_the_token(hf_export: Path, hub: tuple[Mirror, Mirror]) -> None:
    hub_server, cdn = hub
    resolve = f"/{REPO_ID}/resolve/main/speech_tokenizer_v3.onnx"
    assert hub_server.requests[resolve] >= 1
    assert sum(n for path, n in cdn.requests.items() if path.startswith("/_cdn/")) >= 1


def test_token_is_in_no_exported_file(hf_export: Path) -> None:
    token = required_env("BAKE_TEST_HF_TOKEN").encode()
    assert [p for p in hf_export.rglob("*") if p.is_file() and token in p.read_bytes()] == []

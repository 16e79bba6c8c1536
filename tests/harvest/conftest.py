"""Shared by the harvest tests: a loopback Hub the real huggingface_hub downloads from, a job's caches
(a narrowed snapshot, a s3tokenizer checkpoint, a tiktoken vocab), and ``bake harvest`` run with and
without the libraries.

s3tokenizer's table comes from a stand-in package on PYTHONPATH holding only ``_MODELS`` and
``_SHA256S``: bake reads that table from the source, never importing it, as it reads the real one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake.consumers import sha1_name
from tests.hub_server import LoopbackHub
from tests.isolation import NETWORK_ENV
from tests.runners import REPO, bake

CONFIG = b'{"model_type": "bert", "hidden_size": 8}\n'


WEIGHTS = hashlib.sha256(b"weights").digest() * 2048  # 64 KiB, an LFS file served by the CDN


CHECKPOINT = b"onnx checkpoint bytes\n" * 100


S3_URL = "https://example.org/models/speech_tokenizer_test.onnx"


VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/test_base.tiktoken"


VOCAB = b"IQ== 0\nIg== 1\n"


PRELUDE = "# the site's manifest: this comment must survive a harvest\n\n"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    server = LoopbackHub(tmp_path_factory.mktemp("hub"))
    server.commit(
        "org/tiny",
        {
            "config.json": CONFIG,
            "tokenizer/vocab.txt": b"[PAD]\nhello\n",
            "model.safetensors": (WEIGHTS, True),
        },
    )
    server.commit("org/extra", {"config.json": b'{"extra": true}\n'})
    with server:
        yield server


@pytest.fixture
def s3_table(tmp_path: Path) -> str:
    """PYTHONPATH with a stand-in s3tokenizer whose table names CHECKPOINT."""
    package = tmp_path / "stand-in" / "s3tokenizer"
    package.mkdir(parents=True)
    sha = hashlib.sha256(CHECKPOINT).hexdigest()
    (package / "__init__.py").write_text(
        "raise RuntimeError('bake must read this table, never import it')\n"
        f"_MODELS = {{'speech_tokenizer_test': '{S3_URL}'}}\n"
        f"_SHA256S = {{'speech_tokenizer_test': '{sha}'}}\n"
    )
    return f"{package.parent}{os.pathsep}{REPO}"


def download(hub: LoopbackHub, hf_home: Path, code: str) -> None:
    """Run ``code`` with the real huggingface_hub against the loopback Hub, caching into ``hf_home``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in NETWORK_ENV and not k.startswith(("HF_", "HUGGINGFACE_"))
    }
    env |= {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(hf_home), "HF_HUB_DISABLE_XET": "1"}
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


SNAPSHOT_TINY = (
    "from huggingface_hub import snapshot_download\n"
    "snapshot_download('org/tiny', allow_patterns=['config.json', 'model.safetensors'])\n"
)


@pytest.fixture
def job(hub: LoopbackHub, tmp_path: Path) -> Path:
    """The caches of one job: a narrowed snapshot, a s3tokenizer checkpoint, a tiktoken vocab."""
    xdg = tmp_path / "xdg"
    download(hub, xdg / "huggingface", SNAPSHOT_TINY)
    (xdg / "s3tokenizer").mkdir(parents=True)
    (xdg / "s3tokenizer" / "speech_tokenizer_test.onnx").write_bytes(CHECKPOINT)
    (xdg / "tiktoken-rs-cache").mkdir()
    (xdg / "tiktoken-rs-cache" / sha1_name(VOCAB_URL)).write_bytes(VOCAB)
    return xdg


def known_vocab(manifest: Path) -> None:
    """A manifest that names VOCAB_URL (harvest knows a vocab's URL from tiktoken's table or the manifest)."""
    sha = hashlib.sha256(VOCAB).hexdigest()
    manifest.write_text(
        PRELUDE + f'[[asset]]\nname = "test_base"\npath = "tiktoken/{sha1_name(VOCAB_URL)}"\n'
        f'sha256 = "{sha}"\nurls = ["{VOCAB_URL}"]\n'
    )


def harvest(*args: str | Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    return bake("harvest", *args, env={"PYTHONPATH": pythonpath} if pythonpath else None)


def bare_harvest(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``bake harvest`` where no library is installed: Python without its site-packages."""
    from tests.runners import cli_env

    return subprocess.run([sys.executable, "-S", "-m", "bake", "harvest", *map(str, args)], env=cli_env(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

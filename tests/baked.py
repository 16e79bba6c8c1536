"""A small asset directory baked the way a build bakes it: generated consumer files, a loopback mirror,
``bake fetch`` with ``--no-origin``, then ``bake seal``.

The manifest keeps the production origin URLs (so the consumers' naming rules hold) and every
fetch rewrites them onto the loopback mirror, so nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bake.asset import Asset
from tests.assets import (
    CHECKPOINT_MIRROR_PATH,
    O200K_MIRROR_PATH,
    O200K_URL,
    checkpoint_bytes,
    mirror_args,
    sha256,
)
from tests.mirror import Mirror

S3_URL = "https://www.modelscope.cn/" + CHECKPOINT_MIRROR_PATH.removeprefix("modelscope/")
S3_PATH = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"
VOCAB_PATH = "tiktoken/" + hashlib.sha1(O200K_URL.encode()).hexdigest()
# A consumer the manifest declares, with a nested file: served like the built-ins.
WHISPER_MIRROR_PATH = "openaipublic/whisper/models/base.pt"
WHISPER_URL = "https://openaipublic.blob.core.windows.net/whisper/models/base.pt"
WHISPER_PATH = "whisper/models/base.pt"
DECLARED = {"whisper": ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]}
# Small stand-ins with the production names; their hashes go into the manifest.
FILES = {
    S3_PATH: checkpoint_bytes(96 * 1024, seed=b"bake-native-pod-checkpoint"),
    VOCAB_PATH: checkpoint_bytes(24 * 1024, seed=b"bake-native-pod-vocab"),
    WHISPER_PATH: checkpoint_bytes(16 * 1024, seed=b"bake-native-pod-whisper"),
}
URLS = {S3_PATH: S3_URL, VOCAB_PATH: O200K_URL, WHISPER_PATH: WHISPER_URL}
NAMES = {S3_PATH: "speech_tokenizer_v3_25hz", VOCAB_PATH: "o200k_base", WHISPER_PATH: "whisper_base"}
MIRROR_FILES = {
    "/" + CHECKPOINT_MIRROR_PATH: FILES[S3_PATH],
    "/" + O200K_MIRROR_PATH: FILES[VOCAB_PATH],
    "/" + WHISPER_MIRROR_PATH: FILES[WHISPER_PATH],
}


def write_manifest(path: Path) -> Path:
    """Write a manifest naming FILES (vllm: the vocab) and DECLARED, and return its path."""
    entries = [
        f"[[consumer]]\nname = {json.dumps(name)}\nlocations = {json.dumps(locations)}\n"
        for name, locations in DECLARED.items()
    ]
    for rel, data in FILES.items():
        name = NAMES[rel]
        groups = '["vllm", "omni"]' if rel == VOCAB_PATH else '["omni"]'
        entries.append(
            f'[[asset]]\nname = "{name}"\npath = "{rel}"\nsha256 = "{sha256(data)}"\n'
            f'size = {len(data)}\nurls = ["{URLS[rel]}"]\ngroups = {groups}\n'
        )
    path.write_text("\n".join(entries))
    return path


def serve(mirror: Mirror) -> list[str]:
    """Add FILES to ``mirror`` and return the ``bake fetch`` options that reach only it."""
    for path, data in MIRROR_FILES.items():
        mirror.add(path, data)
    base = mirror.url("/").rstrip("/")
    return [*(f"--mirror={m}" for m in mirror_args(base)), "--no-origin"]


VOCAB_NAME = VOCAB_PATH.removeprefix("tiktoken/")
# A destination's worth of tiny files, for the index, verify and seal tests.
SMALL_FILES = {"s3tokenizer/m.onnx": b"model bytes", VOCAB_PATH: b"vocab bytes"}


def make_dest(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, list[Asset]]:
    """Write ``files`` under ``tmp_path/dest`` as a fetch would; return it and their assets."""
    dest = tmp_path / "dest"
    assets = []
    for i, (rel, data) in enumerate(files.items()):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        url = O200K_URL if rel.startswith("tiktoken/") else f"https://example.org/{i}"
        assets.append(Asset(f"a{i}", rel, sha256(data), (url,)))
    return dest, assets

"""The generated checkpoint, its manifest, and the snapshot of this checkout the builds use."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
from pathlib import Path

from bench.common import ASSET_PATH, BENCH_MANIFEST, CHECKPOINT_URL, MIB, REPO


def generate(path: Path, size: int) -> str:
    """Write ``size`` incompressible bytes (a fixed seed) to ``path``; return their sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0xBA4E)
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        left = size
        while left:
            block = rng.randbytes(min(left, 8 * MIB))
            digest.update(block)
            out.write(block)
            left -= len(block)
    return digest.hexdigest()


def bench_manifest(sha256: str, size: int) -> str:
    return (
        "# Written by scripts/bench.py into its snapshot: the generated checkpoint.\n"
        "[[asset]]\n"
        'name = "speech_tokenizer_v3_25hz"\n'
        f'path = "{ASSET_PATH}"\n'
        f'sha256 = "{sha256}"\n'
        f"size = {size}\n"
        f'urls = ["{CHECKPOINT_URL}"]\n'
    )


def snapshot(dest: Path, manifest_text: str) -> Path:
    """Copy this checkout's tracked and unignored files to ``dest``, add the bench manifest, commit it all."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in sorted(set(filter(None, listing.split("\0")))):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    (dest / BENCH_MANIFEST).write_text(manifest_text)
    identity = {
        f"GIT_{r}_{k}": v
        for r in ("AUTHOR", "COMMITTER")
        for k, v in (("NAME", "bench"), ("EMAIL", "bench@bake.invalid"))
    }
    env = {**os.environ, **identity, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench snapshot"]):
        subprocess.run(["git", *cmd], cwd=dest, env=env, check=True, capture_output=True)
    return dest

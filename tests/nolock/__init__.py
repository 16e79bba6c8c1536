"""A filesystem whose locks fail, as vLLM's shared HF volume on NFS without lockd: nolock.c beside
this file, built once per session and loaded with LD_PRELOAD, makes flock(2) and fcntl(2) locks
fail with ENOLCK under one directory, and changes nothing else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.image import fail_or_skip
from tests.serve import require

SOURCE = Path(__file__).resolve().parent / "nolock.c"


def build(out_dir: Path) -> Path:
    """Compile the shim into ``out_dir``; returns the shared object's path."""
    out = out_dir / "libnolock.so"
    subprocess.run(
        [require("cc"), "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(out), str(SOURCE), "-ldl"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return out


def environment(shim: Path, under: Path) -> dict[str, str]:
    """The variables that make every lock under ``under`` fail, for a process and its children."""
    return {"LD_PRELOAD": str(shim), "BAKE_TEST_NOLOCK_UNDER": str(under)}


def ext4_volume(root: Path, size: int, name: str = "volume") -> Path:
    """A fresh ext4 filesystem of ``size`` bytes, loop-mounted at ``root/name`` (unmount it with
    ``umount -l``); a missing mount is a failure under CI=true."""
    image, target = root / f"{name}.img", root / name
    with image.open("wb") as fh:
        fh.truncate(size)
    subprocess.run([require("mkfs.ext4"), "-q", str(image)], check=True, capture_output=True)
    target.mkdir()
    done = subprocess.run(["mount", "-o", "loop", str(image), str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        fail_or_skip(f"cannot mount an ext4 image here: {done.stderr.strip()}")
    return target

"""Filesystems and clocks that misbehave, simulated at the calls only, with LD_PRELOAD shims built from
the C files beside this one (once per session), for every dynamically linked program:

- nolock.c: flock(2) and fcntl(2) locks under one directory fail with ENOLCK, as vLLM's shared HF
  volume on NFS without lockd; or, with BAKE_TEST_FLOCK=succeed, flock succeeds for every caller and
  excludes no one, as NFS with local_lock=flock or Lustre's localflock across nodes;
- clockstep.c: the realtime clock steps 60 s ahead and back, call after call;
- slowwrite.c: writes under one directory sleep first, a slow disk with a copy in progress.

Each changes nothing else. Busybox's applets are static, out of their reach: tested separately.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.image import fail_or_skip
from tests.serve import require

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nolock.c"


def build(out_dir: Path, source: Path = SOURCE) -> Path:
    """Compile the shim ``source`` into ``out_dir``; returns the shared object's path."""
    out = out_dir / f"lib{source.stem}.so"
    subprocess.run(
        [require("cc"), "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(out), str(source), "-ldl"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return out


def environment(shim: Path, under: Path) -> dict[str, str]:
    """The variables that make every lock under ``under`` fail, for a process and its children."""
    return {"LD_PRELOAD": str(shim), "BAKE_TEST_NOLOCK_UNDER": str(under)}


def not_excluding(shim: Path, under: Path) -> dict[str, str]:
    """The variables that make every flock under ``under`` succeed, for every caller, excluding no one."""
    return {**environment(shim, under), "BAKE_TEST_FLOCK": "succeed"}


def stepping_clock(shim: Path, seconds: int = 60) -> dict[str, str]:
    """The variables that step the realtime clock ``seconds`` ahead and back, call after call."""
    return {"LD_PRELOAD": str(shim), "BAKE_TEST_CLOCK_STEP": str(seconds)}


def slow_disk(shim: Path, under: Path, ms: int) -> dict[str, str]:
    """The variables that make each write under ``under`` take ``ms`` milliseconds first."""
    return {"LD_PRELOAD": str(shim), "BAKE_TEST_SLOW_UNDER": str(under), "BAKE_TEST_SLOW_MS": str(ms)}


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

"""Run bake, git and sh as subprocesses, the way a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bake(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bake ARGS`` from this checkout; return the finished process."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "bake", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=120,
    )


def git(cwd: Path, *args: str) -> bytes:
    """Run git in ``cwd``; return its stdout. Raises CalledProcessError on failure."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def sh(cwd: Path, script: str) -> None:
    """Run a ``sh -eu`` script in ``cwd``. Raises CalledProcessError on failure."""
    subprocess.run(["sh", "-eu", "-c", script], cwd=cwd, check=True, capture_output=True)

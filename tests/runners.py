"""Run bake, git and sh as subprocesses, the way a user runs them: the one runner every suite uses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.isolation import NETWORK_ENV

REPO = Path(__file__).resolve().parents[1]
# Settings of the machine running the tests that must not steer the bake under test.
_FOREIGN_ENV = (*NETWORK_ENV, "SSL_CERT_FILE")


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a `bake` subprocess: this checkout importable, no proxy/Hub/mirror settings."""
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def bake_command(*args: str | Path) -> list[str]:
    """The argv of ``python -m bake ARGS`` with this interpreter."""
    return [sys.executable, "-m", "bake", *map(str, args)]


def bake(
    *args: str | Path, cwd: Path = REPO, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bake ARGS`` from this checkout; return the finished process."""
    return subprocess.run(
        bake_command(*args),
        env=cli_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pytest_run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pytest ARGS`` in ``cwd`` as another project would (bake.testing's plugin loaded
    through its entry point), without the machine's BAKE_IMAGE, with ``env`` added."""
    clean = {k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def git(cwd: Path, *args: str) -> bytes:
    """Run git in ``cwd``; return its stdout. Raises CalledProcessError on failure."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def sh(cwd: Path, script: str) -> None:
    """Run a ``sh -eu`` script in ``cwd``. Raises CalledProcessError on failure."""
    subprocess.run(["sh", "-eu", "-c", script], cwd=cwd, check=True, capture_output=True)

"""Reliability suite fixtures: the image tests' image, a tmpfs, an engine that lies; the fault table."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.image import fail_or_skip

# The image under test, resolved (and failed under CI=true when missing) exactly as tests/image does.
from tests.image.conftest import image, run  # noqa: F401

from . import SUMMARY
from .lying_engine import LyingEngine
from .newcomer import DATA

# Property tests (test_properties.py): every example runs the real CLI, so examples are few.
# CI runs a fixed seed (derandomize) so a red run reproduces; HYPOTHESIS_PROFILE=thorough
# searches twenty times as many inputs on demand.
_PROPERTY_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
settings.register_profile("ci", max_examples=40, derandomize=True, print_blob=True, **_PROPERTY_SETTINGS)
settings.register_profile("dev", max_examples=40, **_PROPERTY_SETTINGS)
settings.register_profile("thorough", max_examples=800, **_PROPERTY_SETTINGS)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``tmpfs(name, SIZE_OR_OPTION, ...)``: a tmpfs at tmp_path/name, unmounted afterwards.

    An int is its size in bytes; strings are mount options (``ro``, ``nr_inodes=5``).
    A filesystem of the test's own: a full one never touches the machine's disk.
    """
    if os.geteuid() != 0 or shutil.which("mount") is None:
        fail_or_skip("mounting a tmpfs needs root and mount(8)")
    mounted: list[Path] = []

    def mount(name: str, *options: int | str) -> Path:
        where = tmp_path / name
        where.mkdir(exist_ok=True)
        spec = ",".join(f"size={o}" if isinstance(o, int) else o for o in options)
        subprocess.run(["mount", "-t", "tmpfs", "-o", spec, "tmpfs", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", str(where)], check=True)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A newcomer's one small asset, at tmp_path/src/model.bin (tests/reliability/newcomer.py)."""
    path = tmp_path / "src" / "model.bin"
    path.parent.mkdir()
    path.write_bytes(DATA)
    return path


@pytest.fixture
def lying_engine(tmp_path: Path) -> Iterator[LyingEngine]:
    with LyingEngine(tmp_path / "engine.sock") as engine:
        yield engine


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print what the randomised runs measured, whatever pytest's capture settings."""
    lines = config.stash.get(SUMMARY, None)
    if not lines:
        return
    terminalreporter.write_sep("=", "reliability: randomised faults")
    for line in lines:
        terminalreporter.write_line(line)

"""Reliability suite fixtures: the image tests' image fixtures, and the fault table in the summary."""

from __future__ import annotations

import pytest

# The image under test, resolved (and failed under CI=true when missing) exactly as tests/image does.
from tests.image.conftest import image, run  # noqa: F401

from . import SUMMARY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print what the randomised runs measured, whatever pytest's capture settings."""
    lines = config.stash.get(SUMMARY, None)
    if not lines:
        return
    terminalreporter.write_sep("=", "reliability: randomised faults")
    for line in lines:
        terminalreporter.write_line(line)

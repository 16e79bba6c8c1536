"""Reliability suite fixtures: the image tests' image fixtures, and the fault table in the summary."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# The image under test, resolved (and failed under CI=true when missing) exactly as tests/image does.
from tests.image.conftest import image, run  # noqa: F401

from . import SUMMARY

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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print what the randomised runs measured, whatever pytest's capture settings."""
    lines = config.stash.get(SUMMARY, None)
    if not lines:
        return
    terminalreporter.write_sep("=", "reliability: randomised faults")
    for line in lines:
        terminalreporter.write_line(line)

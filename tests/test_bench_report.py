"""The bench's report (issue 28 finding 11): a missing plotter costs the plot, never the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runners import REPO


@pytest.mark.timeout(30)
def test_a_missing_plotter_costs_the_plot_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from bench import report
    from bench.common import BenchError

    def no_matplotlib(scale: dict, out: Path, title: str) -> None:
        raise BenchError("the scale plot needs matplotlib: pip install 'bake-assets[bench]'")

    monkeypatch.setattr(report, "table", lambda found: "| the table |")
    found = {"measures": {"scale": {"shell": "dash", "cases": {}}}, "profile": "full"}
    out = tmp_path / "bench.json"
    assert report.publish(found, out, tmp_path / "scale.png", no_matplotlib) is False
    assert json.loads(out.read_text()) == found
    printed = capsys.readouterr()
    assert "| the table |" in printed.out
    assert "matplotlib" in printed.err and not (tmp_path / "scale.png").exists()

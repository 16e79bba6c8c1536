"""The bench's report (issue 28 finding 11): a missing plotter costs the plot, never the figures; and
docs/performance.md's table of measures is the bench's registry's (issue 41)."""

from __future__ import annotations

import json
import re
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


def _table_rows(text: str) -> list[list[str]]:
    """The cells of the table headed ``| # | measure |``, a list per row (escaped pipes kept in a cell)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| # | measure |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


@pytest.mark.timeout(30)
def test_the_performance_table_is_the_registrys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from bench.measures import MEASURES

    rows = _table_rows((REPO / "docs/performance.md").read_text(encoding="utf-8"))
    assert [(row[0], row[1], row[-1]) for row in rows] == [
        (str(m.number), m.name, m.target) for m in MEASURES
    ]


def test_the_compare_table_names_each_row_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from bench import compare
    from bench.measures import MEASURES, MODES

    (mode,) = [m for m in MODES if m.flag == "compare"]
    result = {"old": "abc1234", "rounds": 3, "scale_files": 10_000}
    for i, (key, _, _) in enumerate(compare.ROWS):
        result[key] = {"unit": "ms", "old": 2.0, "new": 1.0 + i, "ratio": (1.0 + i) / 2.0}
    rows = mode.table(result).splitlines()[4:]
    names = {m.number: m.name for m in MEASURES}
    assert len(rows) == len(compare.ROWS) == len({key for key, _, _ in compare.ROWS})
    for row, (_, number, _) in zip(rows, compare.ROWS, strict=True):
        assert row.startswith(f"| {names[number]}, ") and row.count(f"(measure {number})") == 1, row
    assert [row for row in rows if "10,000 files, fresh" in row] != [], rows

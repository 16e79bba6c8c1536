"""The scale plot (measure 9): job start against the number of files, one line per case, log-log.

matplotlib is a bench-only dependency (`pip install 'bake-assets[bench]'`); it is imported here only.
"""

from __future__ import annotations

from pathlib import Path

from bench.common import BenchError
from bench.scale import CASES

STYLE = {
    "fresh": ("tab:blue", "o-"),
    "empty": ("tab:cyan", "o--"),
    "served": ("tab:green", "s-"),
    "cp -rs": ("black", "x:"),
    "node": ("tab:red", "^-"),
    "node served": ("tab:orange", "^--"),
    "hub fresh": ("tab:purple", "D-"),
    "hub served": ("tab:pink", "D--"),
}


def draw(scale: dict, out: Path, title: str) -> None:
    """Write the PNG to ``out``. Raises BenchError when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise BenchError("the scale plot needs matplotlib: pip install 'bake-assets[bench]'") from None
    counts = sorted(int(c) for c in scale["files"])
    figure, axes = pyplot.subplots(figsize=(7.5, 4.8), dpi=110)
    for case in CASES:
        color, marker = STYLE[case]
        values = [scale["files"][str(c)][case] for c in counts]
        axes.plot(counts, values, marker, color=color, label=case, linewidth=1.4, markersize=5)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("baked files at the location")
    axes.set_ylabel("job start, ms (median)")
    axes.set_xticks(counts, [f"{c:,}" for c in counts])
    axes.axhline(20, color="tab:green", linewidth=0.6, alpha=0.5)
    axes.axhline(100, color="tab:blue", linewidth=0.6, alpha=0.5)
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(fontsize=8, ncols=2, loc="upper left")
    axes.set_title(title, fontsize=9)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    pyplot.close(figure)

"""Progress sinks: periodic log lines for build logs, a tqdm bar on a terminal, the final line per asset."""

from __future__ import annotations

import io
import sys

import pytest

from bake.fetch import FetchRecord
from bake.fetch.progress import LogProgress, Progress, TqdmProgress, make_progress, ready_line
from bake.manifest import Asset

MIB = 1 << 20
ASSET = Asset("vocab", "tiktoken/x", "0" * 64, ("https://example/x",), 100 * MIB)


def record(*, cached: bool = False, nbytes: int = 60 * MIB, source: str = "https://example/x") -> FetchRecord:
    return FetchRecord(
        name="vocab",
        path="tiktoken/x",
        source=source,
        bytes=0 if cached else nbytes,
        size=100 * MIB,
        seconds=12.34,
        attempts=0 if cached else 2,
        cached=cached,
        sha256="0" * 64,
    )


@pytest.mark.parametrize(
    ("rec", "line"),
    [
        pytest.param(record(), "vocab: ready in 12.3 s (60.0 MiB from https://example/x)", id="network"),
        pytest.param(
            record(cached=True, source="cache"), "vocab: ready in 12.3 s (100.0 MiB from cache)", id="cache"
        ),
    ],
)
def test_ready_line(rec: FetchRecord, line: str) -> None:
    assert ready_line(rec) == line


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_log_progress_prints_every_few_seconds_with_rate_and_eta() -> None:
    out, clock = io.StringIO(), FakeClock()
    sink = LogProgress(out, every=5.0, clock=clock)
    sink.start(ASSET, 100 * MIB)
    clock.now += 1
    sink.advance(ASSET, 5 * MIB)  # too soon for a line
    assert out.getvalue() == ""
    clock.now += 4
    sink.advance(ASSET, 5 * MIB)
    clock.now += 5
    sink.advance(ASSET, 20 * MIB)
    sink.done(record())
    assert out.getvalue().splitlines() == [
        "vocab: 10.0/100.0 MiB, 2.0 MiB/s, ETA 45 s",
        "vocab: 30.0/100.0 MiB, 4.0 MiB/s, ETA 18 s",
        "vocab: ready in 12.3 s (60.0 MiB from https://example/x)",
    ]


def test_log_progress_without_total() -> None:
    out, clock = io.StringIO(), FakeClock()
    sink = LogProgress(out, every=5.0, clock=clock)
    sink.start(ASSET, None)
    clock.now += 5
    sink.advance(ASSET, 10 * MIB)
    assert out.getvalue() == "vocab: 10.0 MiB, 2.0 MiB/s\n"


def test_log_progress_leaves_a_failure_to_the_error() -> None:
    out = io.StringIO()
    sink = LogProgress(out)
    sink.start(ASSET, None)
    sink.failed(ASSET, RuntimeError("HTTP 404 from https://example/x\nmore detail"))
    assert out.getvalue() == ""


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_make_progress_uses_tqdm_on_a_terminal() -> None:
    pytest.importorskip("tqdm")
    assert isinstance(make_progress(Tty()), TqdmProgress)


def test_make_progress_falls_back_without_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert isinstance(make_progress(Tty()), LogProgress)


def test_make_progress_logs_lines_when_not_a_terminal() -> None:
    assert isinstance(make_progress(io.StringIO()), LogProgress)


def test_tqdm_progress_draws_a_bar_and_prints_the_final_line() -> None:
    tqdm = pytest.importorskip("tqdm").tqdm

    class Eager(tqdm):  # redraw on every update, not at most every 0.1 s
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, mininterval=0, miniters=1, **kwargs)

    out = Tty()
    sink = TqdmProgress(out, Eager)
    sink.start(ASSET, 100 * MIB)
    sink.advance(ASSET, 50 * MIB)
    sink.done(record())
    text = out.getvalue()
    assert "vocab" in text and "50%" in text
    assert "vocab: ready in 12.3 s (60.0 MiB from https://example/x)" in text


def test_base_progress_ignores_everything() -> None:
    sink = Progress()
    sink.start(ASSET, 1)
    sink.advance(ASSET, 1)
    sink.done(record())
    sink.failed(ASSET, RuntimeError("x"))

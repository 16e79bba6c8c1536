"""Progress sinks for fetches: on a terminal a tqdm bar (or, without tqdm, one redrawn line),
periodic log lines in build logs.

On a terminal the first update comes within TTY_EVERY of the first bytes, so any transfer longer
than a second shows progress. ``HF_HUB_DISABLE_PROGRESS_BARS`` (huggingface_hub's switch) turns the
bars and the redrawn line into the build log's periodic lines. Nothing here writes colour, so
``NO_COLOR`` holds too.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from bake.byte_sizes import MIB
from bake.control_chars import escape

if TYPE_CHECKING:
    from bake.asset import Asset
    from bake.fetch.options import FetchRecord

LOG_EVERY = 5.0  # seconds between lines in a build log
TTY_EVERY = 0.25  # seconds between redraws of the terminal line


class Progress:
    """Receives fetch events from several threads at once; this base class ignores them.

    Subclass it and override what you need. ``advance`` is called once per
    chunk written, so overrides must stay cheap.
    """

    def start(self, asset: Asset, total: int | None) -> None:
        """A network transfer of ``asset`` begins; ``total`` is its size when known."""

    def advance(self, asset: Asset, nbytes: int) -> None:
        """``nbytes`` more bytes of ``asset`` are on disk."""

    def resumed(self, asset: Asset, nbytes: int) -> None:
        """Right after ``start``: ``nbytes`` of ``asset`` were on disk already, from an earlier run.

        They count toward its progress, never toward its rate. By default they are an ``advance``.
        """
        self.advance(asset, nbytes)

    def done(self, record: FetchRecord) -> None:
        """``record``'s asset is verified and installed."""

    def failed(self, asset: Asset, error: BaseException) -> None:
        """``asset`` could not be fetched (the error that ends the run says why)."""


def ready_line(record: FetchRecord) -> str:
    """Return the final line for an asset: ``<name>: ready in X s (N MiB from <source>)``."""
    nbytes = record.size if record.cached else record.bytes
    source = escape(record.source)
    return f"{record.name}: ready in {record.seconds:.1f} s ({nbytes / MIB:.1f} MiB from {source})"


@dataclass
class _Tally:
    """One asset's bytes so far, and the time and count at its last progress line."""

    total: int | None
    received: int = 0
    line_time: float = 0.0
    line_received: int = 0
    reused: int = 0  # bytes an earlier run left (a resumed partial): in the progress, not in the rate


class _Tallies(Progress):
    """A sink that counts each asset's bytes itself, writing text to ``stream`` every ``every`` seconds."""

    def __init__(self, stream: TextIO, every: float, clock) -> None:
        self.stream = stream
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()  # guards _assets; text from several threads is written whole
        self._assets: dict[str, _Tally] = {}

    def start(self, asset: Asset, total: int | None) -> None:
        with self._lock:
            self._assets[asset.name] = _Tally(total, line_time=self.clock())
            self._started()

    def _started(self) -> None:
        """Called under the lock once an asset's tally exists."""

    def resumed(self, asset: Asset, nbytes: int) -> None:
        with self._lock:
            tally = self._count(asset, nbytes)
            if tally is not None:
                tally.reused += nbytes
                tally.line_received += nbytes  # the first rate counts only what this run moves

    def _count(self, asset: Asset, nbytes: int) -> _Tally | None:
        """Add ``nbytes`` to the asset's tally (the caller holds the lock); None if it has none."""
        tally = self._assets.get(asset.name)
        if tally is not None:
            tally.received += nbytes
        return tally


class LogProgress(_Tallies):
    """Writes ``name: X/Y MiB, R MiB/s, ETA S s`` every ``every`` seconds per asset, and a final line."""

    def __init__(
        self, stream: TextIO = sys.stderr, *, every: float = LOG_EVERY, clock=time.monotonic
    ) -> None:
        super().__init__(stream, every, clock)

    def advance(self, asset: Asset, nbytes: int) -> None:
        with self._lock:
            tally = self._count(asset, nbytes)
            if tally is None:
                return
            now = self.clock()
            if now - tally.line_time < self.every:
                return
            received, total = tally.received, tally.total
            rate = (received - tally.line_received) / (now - tally.line_time)
            tally.line_time, tally.line_received = now, received
            line = f"{asset.name}: {received / MIB:.1f}"
            if total:
                eta = f"{(total - received) / rate:.0f} s" if rate > 0 else "unknown"
                line += f"/{total / MIB:.1f} MiB, {rate / MIB:.1f} MiB/s, ETA {eta}"
            else:
                line += f" MiB, {rate / MIB:.1f} MiB/s"
            self._write(line)

    def done(self, record: FetchRecord) -> None:
        with self._lock:
            self._assets.pop(record.name, None)
            self._write(ready_line(record))

    def failed(self, asset: Asset, error: BaseException) -> None:
        with self._lock:  # the error that ends the run states the failure, once
            self._assets.pop(asset.name, None)

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


class TtyProgress(_Tallies):
    """One terminal line, redrawn at most every ``every`` seconds: each asset in flight, its bytes, the
    share done, its rate (this run's bytes only, never a resumed partial's) and the time left.

    For a terminal without tqdm. Final lines are printed above it.
    """

    def __init__(self, stream: TextIO, *, every: float = TTY_EVERY, clock=time.monotonic) -> None:
        super().__init__(stream, every, clock)
        self._drawn = 0.0
        self._width = 0  # of the line on screen, to blank what a shorter one leaves

    def _started(self) -> None:
        self._draw()

    def advance(self, asset: Asset, nbytes: int) -> None:
        with self._lock:
            if self._count(asset, nbytes) is not None and self.clock() - self._drawn >= self.every:
                self._draw()

    def done(self, record: FetchRecord) -> None:
        self._finish(record.name, ready_line(record))

    def failed(self, asset: Asset, error: BaseException) -> None:
        self._finish(asset.name, None)  # the error that ends the run states the failure, once

    def _finish(self, name: str, line: str | None) -> None:
        with self._lock:
            self._assets.pop(name, None)
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
            if line is not None:
                self.stream.write(line + "\n")
            self._draw()

    def _draw(self) -> None:
        now = self.clock()
        line = " · ".join(_shown(name, tally, now) for name, tally in self._assets.items())
        self.stream.write("\r" + line + " " * max(self._width - len(line), 0))
        self.stream.flush()
        self._width, self._drawn = len(line), now


def _shown(name: str, tally: _Tally, now: float) -> str:
    """``name: 60.0/100.0 MiB 60%, 2.0 MiB/s, ETA 20 s``; without a total, bytes and rate alone."""
    rate = (tally.received - tally.reused) / max(now - tally.line_time, 1e-6)
    if not tally.total:
        return f"{name}: {tally.received / MIB:.1f} MiB, {rate / MIB:.1f} MiB/s"
    left = max(tally.total - tally.received, 0)
    eta = f"{left / rate:.0f} s" if rate > 0 else "unknown"
    share = 100 * tally.received // tally.total
    return (
        f"{name}: {tally.received / MIB:.1f}/{tally.total / MIB:.1f} MiB {share}%, "
        f"{rate / MIB:.1f} MiB/s, ETA {eta}"
    )


class TqdmProgress(Progress):
    """One tqdm bar per asset in flight; the final line is printed above the bars."""

    def __init__(self, stream: TextIO, tqdm_class) -> None:
        self.stream = stream
        self.tqdm = tqdm_class
        self._lock = threading.Lock()
        self._bars: dict[str, object] = {}

    def start(self, asset: Asset, total: int | None) -> None:
        bar = self.tqdm(
            total=total,
            desc=asset.name,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=self.stream,
            leave=False,
            dynamic_ncols=True,
        )
        with self._lock:
            self._bars[asset.name] = bar

    def advance(self, asset: Asset, nbytes: int) -> None:
        with self._lock:  # several connections feed one bar
            bar = self._bars.get(asset.name)
            if bar is not None:
                bar.update(nbytes)

    def resumed(self, asset: Asset, nbytes: int) -> None:
        """The bar starts at the resumed bytes as its ``initial`` count: tqdm's rate leaves them out."""
        with self._lock:
            bar = self._bars.get(asset.name)
            if bar is not None:
                bar.initial = bar.n = bar.last_print_n = nbytes
                bar.refresh()

    def done(self, record: FetchRecord) -> None:
        self._close(record.name)
        self.tqdm.write(ready_line(record), file=self.stream)

    def failed(self, asset: Asset, error: BaseException) -> None:
        self._close(asset.name)  # the error that ends the run states the failure, once

    def _close(self, name: str) -> None:
        with self._lock:
            bar = self._bars.pop(name, None)
        if bar is not None:
            bar.close()


def make_progress(stream: TextIO = sys.stderr, environ: Mapping[str, str] = os.environ) -> Progress:
    """Return the sink for ``stream``: on a terminal a tqdm bar if tqdm is installed, else a
    TtyProgress; a LogProgress for a build log, or where HF_HUB_DISABLE_PROGRESS_BARS asks for no bars."""
    isatty = getattr(stream, "isatty", None)
    bars_off = environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").strip().lower() in ("1", "true", "yes", "on")
    if isatty is None or not isatty() or bars_off:
        return LogProgress(stream)
    try:
        from tqdm import tqdm
    except ImportError:
        return TtyProgress(stream)
    return TqdmProgress(stream, tqdm)

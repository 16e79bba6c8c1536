"""Progress sinks for fetches: a tqdm bar on a terminal, periodic log lines in build logs."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from bake.text import escape
from bake.units import MIB

if TYPE_CHECKING:
    from bake.fetch.options import FetchRecord
    from bake.manifest import Asset

LOG_EVERY = 5.0


class Progress:
    """Receives fetch events from several threads at once; this base class ignores them.

    Subclass it and override what you need. ``advance`` is called once per
    chunk written, so overrides must stay cheap.
    """

    def start(self, asset: Asset, total: int | None) -> None:
        """A network transfer of ``asset`` begins; ``total`` is its size when known."""

    def advance(self, asset: Asset, nbytes: int) -> None:
        """``nbytes`` more bytes of ``asset`` are on disk (also called once with the resumed amount)."""

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


class LogProgress(Progress):
    """Writes ``name: X/Y MiB, R MiB/s, ETA S s`` every ``every`` seconds per asset, and a final line."""

    def __init__(
        self, stream: TextIO = sys.stderr, *, every: float = LOG_EVERY, clock=time.monotonic
    ) -> None:
        self.stream = stream
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()  # guards _assets; lines from several threads are written whole
        self._assets: dict[str, _Tally] = {}

    def start(self, asset: Asset, total: int | None) -> None:
        with self._lock:
            self._assets[asset.name] = _Tally(total, line_time=self.clock())

    def advance(self, asset: Asset, nbytes: int) -> None:
        with self._lock:
            tally = self._assets.get(asset.name)
            if tally is None:
                return
            tally.received += nbytes
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


def make_progress(stream: TextIO = sys.stderr) -> Progress:
    """Return a tqdm sink when ``stream`` is a terminal and tqdm is installed, else a LogProgress."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return TqdmProgress(stream, tqdm)
    return LogProgress(stream)

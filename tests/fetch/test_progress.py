"""Progress sinks: periodic log lines for build logs, a tqdm bar on a terminal, the final line per asset."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import io
import os
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from bake.asset import Asset
from bake.fetch import FetchRecord
from bake.fetch.progress import LogProgress, Progress, TqdmProgress, TtyProgress, make_progress, ready_line
from tests.image import fail_or_skip
from tests.mirror import Mirror
from tests.runners import REPO, cli_env

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


def test_log_progress_rate_leaves_out_a_resumed_partial() -> None:
    out, clock = io.StringIO(), FakeClock()
    sink = LogProgress(out, every=5.0, clock=clock)
    sink.start(ASSET, 100 * MIB)
    sink.resumed(ASSET, 50 * MIB)  # an earlier run's bytes, on disk before this run began
    clock.now += 5
    sink.advance(ASSET, 10 * MIB)
    assert out.getvalue() == "vocab: 60.0/100.0 MiB, 2.0 MiB/s, ETA 20 s\n"


def test_terminal_line_shows_share_rate_and_eta_without_resumed_bytes() -> None:
    out, clock = Tty(), FakeClock()
    sink = TtyProgress(out, every=0.25, clock=clock)
    sink.start(ASSET, 100 * MIB)
    sink.resumed(ASSET, 50 * MIB)
    clock.now += 5
    sink.advance(ASSET, 10 * MIB)
    last = out.getvalue().split("\r")[-1].strip()
    assert last == "vocab: 60.0/100.0 MiB 60%, 2.0 MiB/s, ETA 20 s", out.getvalue()


def test_tqdm_bar_starts_at_the_resumed_bytes_and_leaves_them_out_of_its_rate() -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    out = Tty()
    sink = TqdmProgress(out, tqdm)
    sink.start(ASSET, 100 * MIB)
    sink.resumed(ASSET, 50 * MIB)
    bar = sink._bars[ASSET.name]
    info = bar.format_dict
    assert (info["n"], info["initial"]) == (50 * MIB, 50 * MIB)  # tqdm's rate is (n - initial) / elapsed
    sink.advance(ASSET, 10 * MIB)
    assert bar.format_dict["n"] == 60 * MIB
    sink.done(record())


def test_make_progress_uses_tqdm_on_a_terminal() -> None:
    pytest.importorskip("tqdm")
    assert isinstance(make_progress(Tty()), TqdmProgress)


def test_make_progress_redraws_a_line_without_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert isinstance(make_progress(Tty()), TtyProgress)


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


# -- on a pseudo-terminal: a transfer throttled to 3 s shows growing updates, the first within 1 s ----------

_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)([kMGT]?)(?:i?B)?\s*/\s*\d")
_SCALE = {"": 1, "k": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SLOW = bytes(range(256)) * (6 * 1024)  # 1.5 MiB at 512 KiB/s: 3 s


def on_a_terminal(argv: list[str], *, tqdm: bool, env: dict[str, str]) -> list[tuple[float, float]]:
    """Run ``argv`` with a pseudo-terminal as stdin, stdout and stderr; return (seconds, amount) per
    progress update it draws, amounts in the update's own units, in order."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    hide = (
        []
        if tqdm
        else [
            "-c",
            "import sys, runpy; sys.modules['tqdm'] = None; runpy.run_module('bake', run_name='__main__')",
        ]
    )
    command = [sys.executable, *(hide or ["-m", "bake"]), *argv]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=cli_env(env), cwd=REPO)
    os.close(slave)
    chunks: list[tuple[float, bytes]] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append((time.monotonic() - started, data))
    os.close(master)
    assert proc.wait(timeout=60) == 0, b"".join(c for _, c in chunks).decode(errors="replace")
    updates = []
    for at, data in chunks:
        for piece in re.split(r"[\r\n]", data.decode(errors="replace")):
            if match := _AMOUNT.search(piece):
                updates.append((at, float(match.group(1)) * _SCALE[match.group(2)]))
    return updates


def startup_seconds() -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "bake", "--version"], env=cli_env(), capture_output=True, check=True
    )
    return time.monotonic() - started


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tqdm", [True, False], ids=["tqdm", "no-tqdm"])
@pytest.mark.parametrize("command", ["fetch", "add"])
def test_a_slow_transfer_shows_growing_progress_on_a_terminal(
    tmp_path: Path, clean_net_env: None, command: str, tqdm: bool
) -> None:
    if tqdm and importlib.util.find_spec("tqdm") is None:
        fail_or_skip("tqdm (in the [test] extra) is needed for the bar's case")
    with Mirror({"/m.bin": SLOW}, rate=512 * 1024) as served:
        manifest_path = tmp_path / "assets.toml"
        common = ["--manifest", str(manifest_path), "--cache-dir", str(tmp_path / "c"), "--connections", "1"]
        if command == "fetch":
            manifest_path.write_text(
                f'[[asset]]\nname = "m"\npath = "d/m.bin"\nsha256 = "{hashlib.sha256(SLOW).hexdigest()}"\n'
                f'size = {len(SLOW)}\nurls = ["{served.url("/m.bin")}"]\n'
            )
            argv = ["fetch", "--dest", str(tmp_path / "dest"), *common]
        else:
            argv = ["add", served.url("/m.bin"), "--path", "d/m.bin", *common]
        startup = startup_seconds()
        updates = on_a_terminal(argv, tqdm=tqdm, env={})
    growing = [(at, amount) for at, amount in updates if amount > 0]
    assert len({amount for _, amount in growing}) >= 2, updates
    amounts = [amount for _, amount in growing]
    assert amounts == sorted(amounts), updates
    assert growing[0][0] <= startup + 1.0, (startup, updates)


def test_hf_hub_disable_progress_bars_turns_the_terminal_line_into_log_lines() -> None:
    assert isinstance(make_progress(Tty(), {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}), LogProgress)

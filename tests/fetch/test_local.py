"""file:// sources, read under the asset's clock: a file that blocks costs the stall timeout, not forever."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake.errors import DownloadError
from bake.fetch import FetchFailed
from bake.fetch.clock import Clock
from bake.fetch.failures import Aborted
from bake.fetch.local import LocalReader
from tests.fetch.conftest import KIB, blob, fetch_one, make_asset


def test_file_url_source(tmp_path: Path) -> None:
    data = blob(100 * KIB)
    (tmp_path / "src.bin").write_bytes(data)
    record = fetch_one(make_asset(data, (tmp_path / "src.bin").as_uri()), tmp_path)
    assert record.bytes == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def clock(timeout: float) -> Clock:
    return Clock("vocab", timeout=timeout, deadline=None, cancel=threading.Event())


def test_a_regular_file_is_opened_with_its_size_and_read(tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(b"hello, file")
    reader = LocalReader(str(tmp_path / "f.bin"), clock(5), threading.Event())
    try:
        assert reader.open() == 11
        view = memoryview(bytearray(8))
        assert (reader.readinto(view), bytes(view)) == (8, b"hello, f")
        assert (reader.readinto(view), bytes(view[:3])) == (3, b"ile")
        assert reader.readinto(view) == 0
    finally:
        reader.close()


@contextlib.contextmanager
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO with no writer: opening it for reading blocks; a writer let in at the end unblocks it."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_a_file_that_blocks_costs_the_stall_timeout_not_forever(tmp_path: Path) -> None:
    with fifo(tmp_path) as path:
        reader = LocalReader(str(path), clock(0.3), threading.Event())
        started = time.monotonic()
        with pytest.raises(
            DownloadError, match=r"no data for 0.3 s while opening it \(.*fifo\) \(stalled\)"
        ) as info:
            reader.open()
        assert info.value.retryable and time.monotonic() - started < 2


def test_an_aborted_transfer_stops_waiting_for_the_file(tmp_path: Path) -> None:
    abort = threading.Event()
    with fifo(tmp_path) as path:
        reader = LocalReader(str(path), clock(30), abort)
        threading.Timer(0.2, abort.set).start()
        started = time.monotonic()
        with pytest.raises(Aborted):
            reader.open()
        assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("make", "says"),
    [
        pytest.param(lambda p: p.mkdir(), "is a directory, not a file", id="a-directory"),
        pytest.param(lambda p: None, "cannot read it", id="missing"),
    ],
)
def test_a_file_url_that_can_never_serve_is_not_retried(tmp_path: Path, make, says: str) -> None:
    source = tmp_path / "src.bin"
    make(source)
    with pytest.raises(FetchFailed, match=says) as info:
        fetch_one(make_asset(b"x", source.as_uri()), tmp_path)
    assert "gave up" not in str(info.value)  # one try: retrying would not change it

"""The segmented transfer: pieces over several connections, each range asked once, resets survived;
helpers taking pieces, a size learnt at the end, a truncation kept for the resume."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from bake.cache import Cache
from bake.errors import DownloadError
from bake.fetch.failures import Aborted
from bake.fetch.partial import PartialFile
from bake.fetch.segments import Claim
from bake.fetch.transfer import Transfer
from tests.fetch.conftest import KIB, MIB, blob, fetch_one, make_asset
from tests.mirror import Mirror, reset


@pytest.mark.parametrize("connections", [1, 4])
def test_segmented_download_splits_over_connections(mirror: Mirror, tmp_path: Path, connections: int) -> None:
    data = blob(6 * MIB + 123)
    mirror.add("/f.bin", data)
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, connections=connections)
    ranges = [entry["range"] for entry in mirror.log]
    assert all(entry["status"] == 206 for entry in mirror.log)
    assert len(set(ranges)) == len(ranges)
    assert len(ranges) >= connections
    assert mirror.bytes_sent["/f.bin"] == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_segmented_download_survives_resets_on_several_connections(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(6 * MIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", reset(300 * KIB), reset(200 * KIB), reset(500 * KIB))
    record = fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, connections=4)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert record.attempts >= 2
    assert mirror.bytes_sent["/f.bin"] < 1.5 * len(data)


class InMemory:
    """A piece connection over bytes in memory: whatever can fetch a claim's bytes serves a transfer."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def fetch(self, claim: Claim):
        return io.BytesIO(self.data[claim.pos : claim.end]).readinto

    def end_piece(self) -> None:
        pass

    def close(self) -> None:
        pass


def start(tmp_path: Path, data: bytes) -> tuple[Transfer, list[int]]:
    cache = Cache(tmp_path / "cache")
    cache.ensure()
    partial = PartialFile(cache, hashlib.sha256(data).hexdigest(), "blob")
    partial.open()
    advanced: list[int] = []
    return Transfer(partial, advanced.append), advanced


def test_helpers_take_the_pieces_the_first_stream_leaves(tmp_path: Path) -> None:
    data = blob(8 * MIB + 5)
    transfer, advanced = start(tmp_path, data)
    first = Claim(0, MIB)
    transfer.plan(len(data), first, connections=4)
    opened: list[InMemory] = []

    def connect() -> InMemory:
        opened.append(InMemory(data))
        return opened[-1]

    transfer.run(
        first, InMemory(data).fetch(first), connection=InMemory(data), open_connection=connect, helpers=3
    )
    assert len(opened) == 3 and sum(advanced) == len(data)
    assert transfer.partial.written.spans == [(0, len(data))]
    assert transfer.partial.path.read_bytes() == data


def test_an_open_ended_stream_learns_the_size_at_its_end(tmp_path: Path) -> None:
    data = blob(300 * KIB)
    transfer, _ = start(tmp_path, data)
    claim = Claim(0, None)
    transfer.single(None, claim)
    transfer.run(claim, io.BytesIO(data).readinto)
    assert (transfer.size, transfer.partial.state.size) == (len(data), len(data))


def test_a_body_that_ends_early_is_a_retryable_truncation_whose_bytes_are_kept(tmp_path: Path) -> None:
    data = blob(300 * KIB)
    transfer, _ = start(tmp_path, data)
    claim = Claim(0, len(data))
    transfer.single(len(data), claim)
    with pytest.raises(
        DownloadError, match=f"ended early at byte {100 * KIB}, expected up to {len(data)}"
    ) as info:
        transfer.run(claim, io.BytesIO(data[: 100 * KIB]).readinto)
    assert info.value.retryable
    saved = transfer.partial.cache.load_state(transfer.partial.sha256)
    assert saved.done == [(0, 100 * KIB)]  # a resume starts there


def test_fail_keeps_the_first_real_error_and_stops_every_connection(tmp_path: Path) -> None:
    transfer, _ = start(tmp_path, b"x")
    transfer.fail(Aborted())  # another thread's quiet stop is nobody's error
    assert transfer.aborted() and transfer.error is None
    first = DownloadError("reset")
    transfer.fail(first)
    transfer.fail(DownloadError("a later one"))
    assert transfer.error is first

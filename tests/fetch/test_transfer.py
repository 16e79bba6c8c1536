"""The segmented transfer: pieces over several connections, each range asked once, resets survived."""

from __future__ import annotations

from pathlib import Path

import pytest

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

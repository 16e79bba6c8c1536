"""The cache's partial: resumed after a reset, a failed run or SIGKILL; a full disk named, dest left clean."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from bake import fetch
from bake.fetch import FetchFailed, fetch_assets
from tests.fetch.conftest import KIB, MIB, blob, child, fetch_one, files_under, make_asset, opts
from tests.mirror import Mirror, http_error, reset


def test_resume_after_reset_resends_little(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(4 * MIB)
    mirror.add("/f.bin", data)
    mirror.rate = 16 * MIB  # paced, so the client reads what is sent before the reset discards it
    mirror.script("/f.bin", reset(3 * MIB))
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, connections=1)
    assert mirror.bytes_sent["/f.bin"] <= 1.1 * len(data)
    first, second = mirror.log
    assert first["range"] == "bytes=0-"
    resumed_from = int(second["range"].removeprefix("bytes=").rstrip("-"))
    assert resumed_from >= 3 * MIB - 256 * KIB
    assert second["if_range"] is not None  # guarded by the ETag
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_partial_survives_a_failed_run_and_the_next_run_resumes(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(2 * MIB)
    mirror.add("/f.bin", data)
    mirror.rate = 16 * MIB
    mirror.script("/f.bin", reset(MIB + 100 * KIB), http_error(404))
    asset = make_asset(data, mirror.url("/f.bin"))
    with pytest.raises(FetchFailed):
        fetch_one(asset, tmp_path, connections=1)
    assert files_under(tmp_path / "dest") == []
    state = json.loads((tmp_path / f"cache/partial/{asset.sha256}.json").read_text())
    assert state["done"] and state["done"][0][0] == 0 and state["done"][0][1] >= MIB
    mirror.reset_counters()
    fetch_one(asset, tmp_path, connections=1)
    assert mirror.bytes_sent["/f.bin"] <= len(data) - MIB
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert files_under(tmp_path / "cache/partial") == []


def test_sigkill_at_half_then_rerun_refetches_little(clean_net_env: None, tmp_path: Path) -> None:
    data = blob(16 * MIB)
    sha = hashlib.sha256(data).hexdigest()
    state = tmp_path / f"cache/partial/{sha}.json"
    with Mirror({"/f.bin": data}, rate=2 * MIB) as slow:
        proc = child(slow.url("/f.bin"), data, tmp_path / "dest", tmp_path / "cache")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done = sum(e - s for s, e in json.loads(state.read_text())["done"]) if state.exists() else 0
            if done >= len(data) // 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (tmp_path / "dest/data/blob.bin").exists()
        slow.rate = None
        fetch_one(make_asset(data, slow.url("/f.bin")), tmp_path, connections=2)
        total = slow.bytes_sent["/f.bin"]
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    # Killed at >= 50%: without resume the total would be >= 1.5x.
    assert total <= 1.15 * len(data), total / len(data)
    assert files_under(tmp_path / "dest") == ["data/blob.bin"]


def test_no_space_names_asset_and_sizes_and_leaves_dest_clean(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier, data = blob(30 * KIB, b"e"), blob(3 * MIB)
    mirror.add("/earlier", earlier)
    mirror.add("/big", data)
    first = make_asset(earlier, mirror.url("/earlier"), name="earlier", path="a/earlier.bin")
    fetch_assets([first], tmp_path / "dest", opts(tmp_path))
    before = (tmp_path / "dest/a/earlier.bin").stat()

    def full(fd: int, data: object, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)  # the partial takes disk as bytes arrive
    big = make_asset(data, mirror.url("/big"), name="checkpoint", path="b/big.bin")
    with pytest.raises(FetchFailed) as info:
        fetch_assets([first, big], tmp_path / "dest", opts(tmp_path))
    message = str(info.value)
    assert "checkpoint" in message and "no space" in message and f"need {len(data)} bytes" in message
    assert "available" in message
    assert isinstance(info.value.failures["checkpoint"], fetch.NoSpaceError)
    assert files_under(tmp_path / "dest") == ["a/earlier.bin"]
    after = (tmp_path / "dest/a/earlier.bin").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

"""The cache's partial: resumed after a reset, a failed run or SIGKILL; a full disk named, dest left clean;
its saved progress, the commit of verified bytes only, and the bounds of a download of unknown size."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from bake import atomic, fetch
from bake.cache import Cache, PartialState
from bake.errors import ChecksumMismatch
from bake.fetch import FetchFailed, fetch_assets
from bake.fetch.failures import DiskBound
from bake.fetch.options import DEFAULT_MIN_FREE, MIN_FREE_SHARE
from bake.fetch.partial import DiskBounds, PartialFile
from bake.fetch.segments import Claim
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


DATA = b"0123456789" * 100
SHA = hashlib.sha256(DATA).hexdigest()


def partial(tmp_path: Path, bounds: DiskBounds | None = None) -> PartialFile:
    cache = Cache(tmp_path / "cache")
    cache.ensure()
    opened = PartialFile(cache, SHA, "vocab", bounds)
    opened.open()
    return opened


def test_saved_progress_is_what_a_later_open_resumes(tmp_path: Path) -> None:
    first = partial(tmp_path)
    first.state = PartialState(size=len(DATA), url="https://m/f", etag='"v1"')
    claim = Claim(0, 400)
    first.write(claim, memoryview(DATA[:400]), 0)
    first.write(Claim(700, 1000), memoryview(DATA[700:]), 700)
    assert claim.pos == 400 and first.received == 700
    first.save()
    first.close()
    again = partial(tmp_path)
    assert again.written.spans == [(0, 400), (700, 1000)]
    assert (again.state.size, again.state.etag) == (len(DATA), '"v1"')


def test_a_progress_record_claiming_more_than_the_file_holds_starts_empty(tmp_path: Path) -> None:
    first = partial(tmp_path)
    first.write(Claim(0, 400), memoryview(DATA[:400]), 0)
    first.save()
    first.close()
    os.truncate(first.path, 100)  # the record says 400 bytes are on disk; only 100 are
    again = partial(tmp_path)
    assert again.written.spans == [] and os.path.getsize(again.path) == 0


def test_a_partial_with_no_bytes_is_removed_on_close(tmp_path: Path) -> None:
    empty = partial(tmp_path)
    assert empty.path.exists()
    empty.close()
    assert not empty.path.exists()


@pytest.mark.parametrize("right", [True, False], ids=["matches", "mismatch"])
def test_verify_commits_only_the_expected_bytes(tmp_path: Path, right: bool) -> None:
    whole = partial(tmp_path)
    whole.write(Claim(0, len(DATA)), memoryview(DATA), 0)
    whole.state.size = len(DATA)
    expected = SHA if right else "f" * 64
    if not right:
        with pytest.raises(ChecksumMismatch, match=f"expected {expected}, got {SHA}"):
            whole.verify(expected, "https://m/f")
        assert not whole.cache.object_path(SHA).exists()
        return
    assert whole.verify(expected, "https://m/f") == SHA
    assert whole.cache.object_path(SHA).read_bytes() == DATA and not whole.path.exists()


def test_an_unsized_download_is_held_to_the_max_size_cap(tmp_path: Path) -> None:
    bounded = partial(tmp_path, DiskBounds(max_size=500, min_free=0))
    bounded.check_claim(500, "https://m/f")
    with pytest.raises(DiskBound, match=r"announces 501 bytes, more than the --max-size cap") as info:
        bounded.check_claim(501, "https://m/f")
    assert not info.value.disk and "give the asset its size in the manifest" in str(info.value)
    with pytest.raises(DiskBound, match="sent more than the --max-size cap"):
        bounded.write(Claim(400, 600), memoryview(DATA[400:600]), 400)
    assert bounded.written.spans == []


def test_an_unsized_download_leaves_the_min_free_reserve(tmp_path: Path) -> None:
    greedy = partial(tmp_path, DiskBounds(max_size=10**15, min_free=10**15))
    with pytest.raises(DiskBound, match="--min-free reserve") as info:
        greedy.write(Claim(0, 10), memoryview(DATA[:10]), 0)
    assert info.value.disk


@pytest.mark.parametrize(
    ("entry", "unsized", "hint"),
    [
        (True, "asset 'vocab' has no size in the manifest", ", or give the asset its size in the manifest"),
        (False, "the size of 'vocab' is unknown", ""),  # bake add: no manifest entry to give it a size
    ],
)
def test_disk_bounds_say_why_they_apply(entry: bool, unsized: str, hint: str) -> None:
    bounds = DiskBounds(max_size=1, min_free=None, entry=entry)
    assert (bounds.unsized("vocab"), bounds.or_give_size()) == (unsized, hint)


def test_the_default_reserve_is_the_smaller_of_1_gib_and_5_percent(tmp_path: Path) -> None:
    share = int(atomic.filesystem_bytes(tmp_path) * MIN_FREE_SHARE)
    assert DiskBounds(max_size=1, min_free=None).reserve(tmp_path) == min(DEFAULT_MIN_FREE, share)
    assert DiskBounds(max_size=1, min_free=123).reserve(tmp_path) == 123

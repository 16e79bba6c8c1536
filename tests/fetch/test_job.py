"""One asset's job: the cache first, each source in turn, what a failure names and advises, progress events,
a wrong sha256 kept, and one transfer shared by concurrent processes."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from bake import fetch
from bake.asset import Asset
from bake.fetch import FetchFailed, fetch_assets
from bake.fetch.progress import Progress
from tests.fetch.conftest import KIB, MIB, blob, child, fetch_one, files_under, make_asset, opts
from tests.mirror import Mirror, http_error, wrong_bytes


def test_wrong_bytes_with_a_known_length_are_not_retried(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(300 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", wrong_bytes())
    with pytest.raises(FetchFailed, match="sha256 mismatch"):
        fetch_one(make_asset(data, mirror.url("/f.bin"), size=False), tmp_path)
    assert mirror.requests["/f.bin"] == 1


def test_404_is_not_retried_and_names_everything(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    asset = make_asset(data, mirror.url("/missing.bin"), name="vocab")
    with pytest.raises(FetchFailed) as info:
        fetch_one(asset, tmp_path)
    message = str(info.value)
    assert mirror.requests["/missing.bin"] == 1
    assert "vocab" in message and mirror.url("/missing.bin") in message and "HTTP 404" in message
    assert asset.sha256 in message and "what to do" in message
    assert info.value.failures.keys() == {"vocab"}


def what_to_do(message: str) -> list[str]:
    """The advice lines under "what to do:", one action each."""
    return [line.strip()[2:] for line in message.split("what to do:\n", 1)[1].splitlines()]


@pytest.mark.parametrize(
    ("fault", "advice", "not_advice"),
    [
        pytest.param(http_error(404), "correct the URL in the manifest", "--attempts", id="404"),
        pytest.param(http_error(503), "raise --attempts or --timeout", "correct the URL", id="flaky"),
    ],
)
def test_what_to_do_fits_the_failure_and_is_whole(
    mirror: Mirror, tmp_path: Path, fault, advice: str, not_advice: str
) -> None:
    """A 404 is not told to retry harder, and each action is a whole line (issue 17)."""
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *[fault] * 5)
    with pytest.raises(FetchFailed) as info:
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, attempts=2)
    lines = what_to_do(str(info.value))
    assert any(advice in line for line in lines), lines
    assert not any(not_advice in line for line in lines), lines
    assert all(line.endswith(("sha256", "REPLACEMENT", "manifest")) for line in lines), lines


def test_wrong_bytes_on_first_source_then_good_second(
    mirror: Mirror, mirror2: Mirror, tmp_path: Path
) -> None:
    data = blob(200 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *[wrong_bytes()] * 5)
    mirror2.add("/f.bin", data)
    record = fetch_one(make_asset(data, mirror.url("/f.bin"), mirror2.url("/f.bin")), tmp_path)
    assert record.source == mirror2.url("/f.bin")
    assert mirror.requests["/f.bin"] == 1  # a checksum mismatch is not retried on the same source
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_wrong_bytes_everywhere_fails_with_expected_and_seen(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", wrong_bytes())
    wrong = hashlib.sha256(data.translate(bytes(range(255, -1, -1)))).hexdigest()
    with pytest.raises(FetchFailed) as info:
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert f"expected {hashlib.sha256(data).hexdigest()}, got {wrong}" in str(info.value)
    assert not (tmp_path / "dest/data").exists() or files_under(tmp_path / "dest") == []
    assert files_under(tmp_path / "cache/partial") == []  # bad bytes are not kept for a resume


def test_cache_hit_costs_no_request(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    mirror.add("/f.bin", data)
    asset = make_asset(data, mirror.url("/f.bin"))
    fetch_assets([asset], tmp_path / "one", opts(tmp_path))
    mirror.reset_counters()
    (record,) = fetch_assets([asset], tmp_path / "two", opts(tmp_path))
    assert sum(mirror.requests.values()) == 0
    assert (record.cached, record.source, record.bytes) == (True, "cache", 0)
    assert (tmp_path / "two/data/blob.bin").read_bytes() == data


def test_corrupt_cache_object_is_fetched_again(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    mirror.add("/f.bin", data)
    asset = make_asset(data, mirror.url("/f.bin"))
    fetch_assets([asset], tmp_path / "one", opts(tmp_path))
    obj = tmp_path / f"cache/objects/{asset.sha256}"
    obj.unlink()  # corrupt only the cache's copy
    obj.write_bytes(b"X" * len(data))
    (record,) = fetch_assets([asset], tmp_path / "two", opts(tmp_path))
    assert not record.cached
    assert (tmp_path / "two/data/blob.bin").read_bytes() == data
    assert obj.read_bytes() == data


@pytest.mark.parametrize("shared_dest", [False, True], ids=["own-dests", "one-dest"])
def test_concurrent_processes_share_one_transfer(
    clean_net_env: None, tmp_path: Path, shared_dest: bool
) -> None:
    data = blob(2 * MIB)
    with Mirror({"/f.bin": data}, rate=2 * MIB) as slow:
        procs = [
            child(
                slow.url("/f.bin"),
                data,
                tmp_path / ("dest" if shared_dest else f"dest{i}"),
                tmp_path / "cache",
            )
            for i in range(8)
        ]
        results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
        sent = slow.bytes_sent["/f.bin"]
    assert [rc for rc, _ in results] == [0] * 8, results
    assert sent == len(data)  # one transfer, counted by the server
    for dest in {tmp_path / ("dest" if shared_dest else f"dest{i}") for i in range(8)}:
        assert files_under(dest) == ["data/blob.bin"]
        assert (dest / "data/blob.bin").read_bytes() == data


class Recorder(Progress):
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.lock = threading.Lock()

    def start(self, asset: Asset, total: int | None) -> None:
        self.events.append(("start", asset.name, total))

    def advance(self, asset: Asset, nbytes: int) -> None:
        with self.lock:
            self.events.append(("advance", asset.name, nbytes))

    def done(self, record: fetch.FetchRecord) -> None:
        self.events.append(("done", record.name, record.bytes))

    def failed(self, asset: Asset, error: BaseException) -> None:
        self.events.append(("failed", asset.name, str(error)))


def test_progress_sees_start_bytes_and_done(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(3 * MIB)
    mirror.add("/f.bin", data)
    sink = Recorder()
    fetch_assets([make_asset(data, mirror.url("/f.bin"))], tmp_path / "dest", opts(tmp_path), sink)
    assert sink.events[0] == ("start", "blob", len(data))
    assert sum(n for kind, _, n in sink.events if kind == "advance") == len(data)
    assert sink.events[-1] == ("done", "blob", len(data))


def test_progress_sees_failures(mirror: Mirror, tmp_path: Path) -> None:
    sink = Recorder()
    with pytest.raises(FetchFailed):
        fetch_assets([make_asset(b"x", mirror.url("/nope"))], tmp_path / "dest", opts(tmp_path), sink)
    assert sink.events[-1][:2] == ("failed", "blob")
    assert "HTTP 404" in sink.events[-1][2]


@pytest.mark.parametrize("ranges", [True, False], ids=["ranged", "plain-200"])
def test_a_whole_file_failing_its_sha256_is_fetched_once_and_kept(tmp_path: Path, ranges: bool) -> None:
    """The manifest's sha256 is out of date: one download, both hashes, and the fix costs none.

    A source that ignores ranges gives the length by its Content-Length alone: one more request,
    whose body is never read, confirms it (the issue's case downloaded the whole file twice).
    """
    served = blob(2 * MIB, b"what the server has now")
    wanted = hashlib.sha256(b"what the manifest was written for").hexdigest()
    actual = hashlib.sha256(served).hexdigest()
    # A link of 16 MiB/s, not loopback's: a body never read then stops where the connection is closed.
    with Mirror({"/f.bin": served}, ranges=ranges, rate=16 * MIB) as mirror:
        stale = Asset("blob", "data/blob.bin", wanted, (mirror.url("/f.bin"),), None)
        with pytest.raises(FetchFailed) as failed:
            fetch_assets([stale], tmp_path / "dest", opts(tmp_path))
        if ranges:
            assert mirror.requests["/f.bin"] == 1 and mirror.bytes_sent["/f.bin"] == len(served)
        else:  # the confirmation's body is never read: it stops as soon as the connection is closed
            assert mirror.requests["/f.bin"] == 2 and mirror.bytes_sent["/f.bin"] < 1.25 * len(served)
        requests = mirror.requests["/f.bin"]
        message = str(failed.value)
        assert f"expected {wanted}, got {actual}" in message, message
        assert f'set sha256 = "{actual}" in the manifest' in message, message
        fixed = Asset("blob", "data/blob.bin", actual, (mirror.url("/f.bin"),), None)
        (record,) = fetch_assets([fixed], tmp_path / "dest", opts(tmp_path))
        assert record.cached and mirror.requests["/f.bin"] == requests  # corrected: no download at all
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == served

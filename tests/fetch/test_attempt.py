"""One try at an HTTP source against loopback mirrors with scripted faults: the probe, its status and
Content-Range, a single stream where ranges fail, a file that changes mid-download, a length confirmed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bake.fetch import FetchFailed
from tests.fetch.conftest import KIB, MIB, blob, fetch_one, files_under, make_asset
from tests.mirror import (
    Mirror,
    bad_range,
    http_error,
    ignore_range,
    length_lie,
    no_length,
    replace,
    reset,
    stall,
    truncate,
)

FAULTS = [
    pytest.param([http_error(503), http_error(503)], 3, id="503-503-then-success"),
    pytest.param([http_error(429, retry_after="0")], 2, id="429-with-retry-after"),
    pytest.param([http_error(500), http_error(502), http_error(504)], 4, id="5xx-burst"),
    pytest.param([reset(100 * KIB)], 2, id="reset-mid-body"),
    pytest.param([truncate(100 * KIB)], 2, id="truncated-body"),
    pytest.param([length_lie(+5000)], 1, id="content-length-longer-than-content-range"),
    pytest.param([length_lie(-5000)], 2, id="content-length-too-short"),
    pytest.param([stall(50 * KIB, 10)], 2, id="stall-longer-than-timeout"),
    pytest.param([bad_range(+1)], 2, id="206-with-wrong-content-range"),
    pytest.param([ignore_range()], 1, id="range-ignored-on-first-request"),
]


@pytest.mark.parametrize(("faults", "attempts"), FAULTS)
def test_one_source_recovers_from_fault(mirror: Mirror, tmp_path: Path, faults: list, attempts: int) -> None:
    data = blob(300 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *faults)
    started = time.monotonic()
    record = fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, timeout=0.5, attempts=5)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert record.attempts == attempts
    assert record.source == mirror.url("/f.bin")
    assert not record.cached
    assert time.monotonic() - started < 5  # a stall costs the timeout, not the stall
    assert files_under(tmp_path / "dest") == ["data/blob.bin"]


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(length_lie(+5000), id="content-length-too-long"),
        pytest.param(length_lie(-5000), id="content-length-too-short"),
        pytest.param(truncate(100 * KIB), id="truncated-body"),
        pytest.param(reset(100 * KIB), id="reset-mid-body"),
    ],
)
def test_single_stream_server_recovers_from_fault(clean_net_env: None, tmp_path: Path, fault) -> None:
    data = blob(300 * KIB)
    with Mirror({"/f.bin": data}, ranges=False) as plain:
        plain.script("/f.bin", fault)
        record = fetch_one(make_asset(data, plain.url("/f.bin")), tmp_path, timeout=0.5)
        assert [e["status"] for e in plain.log] == [200, 200]
    assert record.attempts == 2
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


@pytest.mark.parametrize("known_size", [True, False], ids=["manifest-size", "no-size"])
def test_body_without_content_length_ends_at_eof(mirror: Mirror, tmp_path: Path, known_size: bool) -> None:
    data = blob(300 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", no_length())
    record = fetch_one(make_asset(data, mirror.url("/f.bin"), size=known_size), tmp_path)
    assert (record.size, record.attempts) == (len(data), 1)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


@pytest.mark.parametrize("known_size", [True, False], ids=["manifest-size", "no-size"])
def test_body_without_content_length_cut_short_is_retried(
    mirror: Mirror, tmp_path: Path, known_size: bool
) -> None:
    # With a manifest size the early EOF is a visible truncation; without one, the hash refuses the short
    # file, and since nothing vouched for its length that counts as a cut, not as wrong bytes.
    data = blob(300 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", no_length(cut_at=100 * KIB))
    record = fetch_one(make_asset(data, mirror.url("/f.bin"), size=known_size), tmp_path)
    assert record.attempts == 2
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_no_range_support_means_one_stream(clean_net_env: None, tmp_path: Path) -> None:
    data = blob(4 * MIB)
    with Mirror({"/f.bin": data}, ranges=False) as plain:
        fetch_one(make_asset(data, plain.url("/f.bin")), tmp_path, connections=4)
        assert plain.requests["/f.bin"] == 1
        assert plain.bytes_sent["/f.bin"] == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_unknown_size_is_learnt_from_the_server(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(5 * MIB)
    mirror.add("/f.bin", data)
    record = fetch_one(make_asset(data, mirror.url("/f.bin"), size=False), tmp_path, connections=4)
    assert record.size == len(data)
    assert mirror.requests["/f.bin"] > 1  # segmented once the first answer told the size
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_file_replaced_mid_download_restarts_cleanly(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(2 * MIB)
    mirror.add("/f.bin", data)
    mirror.rate = 16 * MIB
    mirror.script("/f.bin", replace(MIB, data))  # same bytes, new ETag: the partial cannot be trusted
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, connections=1)
    second = mirror.log[1]
    assert second["if_range"] is not None and second["status"] == 200
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_changed_file_with_other_bytes_is_never_installed(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(2 * MIB)
    mirror.add("/f.bin", data)
    mirror.rate = 16 * MIB
    mirror.script("/f.bin", replace(MIB, blob(2 * MIB, seed=b"other")))
    with pytest.raises(FetchFailed, match="sha256 mismatch"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, connections=1)
    assert files_under(tmp_path / "dest") == []


def test_a_content_length_that_cut_the_body_is_contradicted_and_fetched_again(
    tmp_path: Path, clean_net_env: None
) -> None:
    """A short Content-Length made a cut body look whole; asked once more, the source says otherwise."""
    data = blob(300 * KIB)
    with Mirror({"/f.bin": data}, ranges=False) as mirror:
        mirror.script("/f.bin", length_lie(-1000))
        record = fetch_one(make_asset(data, mirror.url("/f.bin"), size=False), tmp_path)
        assert mirror.requests["/f.bin"] == 3  # the cut body, the confirmation that contradicts it, the file
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert record.attempts == 2

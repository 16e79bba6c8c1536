"""The fetch engine against loopback mirrors with scripted faults: every fault ends verified or named."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bake import fetch
from bake.asset import Asset
from bake.errors import ManifestError, UsageError
from bake.fetch import FetchFailed, FetchOptions, candidate_urls, fetch_assets, parse_mirrors
from bake.fetch.progress import Progress
from tests.loopback import LoopbackServer
from tests.mirror import (
    Mirror,
    bad_range,
    http_error,
    ignore_range,
    length_lie,
    no_length,
    redirect,
    replace,
    reset,
    stall,
    truncate,
    wrong_bytes,
)

REPO = Path(__file__).resolve().parents[1]
KIB = 1024
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries wait milliseconds, not seconds; tests of Retry-After set their own pause."""
    monkeypatch.setattr(fetch, "BACKOFF_BASE", 0.02)


def blob(size: int, seed: bytes = b"bake") -> bytes:
    """Deterministic incompressible bytes."""
    out = bytearray()
    block = hashlib.sha256(seed).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 32
    return bytes(out[:size])


def make_asset(
    data: bytes, *urls: str, name: str = "blob", path: str = "data/blob.bin", size: bool = True
) -> Asset:
    return Asset(name, path, hashlib.sha256(data).hexdigest(), tuple(urls), len(data) if size else None)


def opts(tmp_path: Path, **overrides: object) -> FetchOptions:
    settings = {"cache_dir": tmp_path / "cache", "timeout": 2.0, "attempts": 3, **overrides}
    return FetchOptions(**settings)


def files_under(root: Path) -> list[str]:
    """Every file below ``root``, hidden ones included, as sorted relative paths."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir())


def fetch_one(asset: Asset, tmp_path: Path, **overrides: object):
    (record,) = fetch_assets([asset], tmp_path / "dest", opts(tmp_path, **overrides))
    return record


# -- faults on one source ------------------------------------------------------------------------

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


def test_wrong_bytes_with_a_known_length_are_not_retried(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(300 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", wrong_bytes())
    with pytest.raises(FetchFailed, match="sha256 mismatch"):
        fetch_one(make_asset(data, mirror.url("/f.bin"), size=False), tmp_path)
    assert mirror.requests["/f.bin"] == 1


def test_retry_after_is_honoured(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", http_error(503, retry_after="1"))
    started = time.monotonic()
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert time.monotonic() - started >= 1.0  # backoff alone would be ~0.02 s
    assert mirror.requests["/f.bin"] == 2


def test_retry_after_past_the_deadline_fails_fast(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", http_error(503, retry_after="60"))
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="past this asset's deadline"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, deadline=5)
    assert time.monotonic() - started < 2


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


def test_fetch_without_a_hub_asset_loads_no_hub_code(mirror: Mirror, tmp_path: Path) -> None:
    """`bake fetch` goes straight to the engine: no Hub downloader, no Hub adding, no huggingface_hub.

    (bake.hub's values, schema and layout come in with the consumer table; none of them runs.)
    """
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        f'[[asset]]\nname = "a"\npath = "d/a.bin"\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        f'urls = ["{mirror.url("/f.bin")}"]\n'
    )
    code = (
        "import sys; from bake import cli\n"
        f"assert cli.main(['fetch', '--manifest', {str(manifest)!r}, '--dest', {str(tmp_path / 'd')!r}, "
        f"'--cache-dir', {str(tmp_path / 'c')!r}, '-q']) == 0\n"
        "hub = ('bake.add.hub_repo', 'bake.add.hub_api', 'bake.fetch.hub_download',"
        " 'huggingface_hub', 'httpx2')\n"
        "print(sorted(m for m in sys.modules if m.startswith(hub)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"  # after fetch's result line


def test_persistent_5xx_gives_up_after_attempts(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *[http_error(503)] * 10)
    with pytest.raises(FetchFailed, match="gave up after 3 attempts"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, attempts=3)
    assert mirror.requests["/f.bin"] == 3


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


def test_no_range_support_means_one_stream(clean_net_env: None, tmp_path: Path) -> None:
    data = blob(4 * MIB)
    with Mirror({"/f.bin": data}, ranges=False) as plain:
        fetch_one(make_asset(data, plain.url("/f.bin")), tmp_path, connections=4)
        assert plain.requests["/f.bin"] == 1
        assert plain.bytes_sent["/f.bin"] == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


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


def test_unknown_size_is_learnt_from_the_server(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(5 * MIB)
    mirror.add("/f.bin", data)
    record = fetch_one(make_asset(data, mirror.url("/f.bin"), size=False), tmp_path, connections=4)
    assert record.size == len(data)
    assert mirror.requests["/f.bin"] > 1  # segmented once the first answer told the size
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_redirect_to_second_loopback_server(mirror: Mirror, mirror2: Mirror, tmp_path: Path) -> None:
    data = blob(3 * MIB)
    mirror2.add("/cdn/f.bin", data)
    mirror.redirect("/f.bin", mirror2.url("/cdn/f.bin"))
    record = fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert record.source == mirror.url("/f.bin")
    assert mirror2.bytes_sent["/cdn/f.bin"] == len(data)
    assert mirror.bytes_sent["/f.bin"] == 0
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_redirect_loop_is_capped(mirror: Mirror, tmp_path: Path) -> None:
    mirror.redirect("/loop", mirror.url("/loop"))
    with pytest.raises(FetchFailed, match="more than 10 redirects"):
        fetch_one(make_asset(b"x", mirror.url("/loop")), tmp_path)
    assert mirror.requests["/loop"] == 11


def test_redirect_to_plain_http_elsewhere_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    mirror.script("/f.bin", redirect("http://example.invalid/f.bin"))
    with pytest.raises(FetchFailed, match="plain http"):
        fetch_one(make_asset(b"x", mirror.url("/f.bin")), tmp_path)


# -- resume -------------------------------------------------------------------------------------


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


CHILD = """
import sys
from pathlib import Path
from bake.fetch import FetchOptions, fetch_assets
from bake.asset import Asset
url, sha, size, dest, cache, connections = sys.argv[1:]
asset = Asset("blob", "data/blob.bin", sha, (url,), int(size))
options = FetchOptions(cache_dir=Path(cache), timeout=10, connections=int(connections))
fetch_assets([asset], Path(dest), options)
"""


def child(url: str, data: bytes, dest: Path, cache: Path, connections: int = 2) -> subprocess.Popen:
    args = [url, hashlib.sha256(data).hexdigest(), str(len(data)), str(dest), str(cache), str(connections)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stderr=subprocess.PIPE, text=True)


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


def test_ctrl_c_stops_at_once_and_keeps_the_partial(clean_net_env: None, tmp_path: Path) -> None:
    data = blob(8 * MIB)
    state = tmp_path / f"cache/partial/{hashlib.sha256(data).hexdigest()}.json"
    with Mirror({"/f.bin": data}, rate=MIB) as slow:
        proc = child(slow.url("/f.bin"), data, tmp_path / "dest", tmp_path / "cache")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (state.exists() and json.loads(state.read_text())["done"]):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        proc.wait(timeout=10)
        stopped_in = time.monotonic() - started
        stderr = proc.stderr.read()
    assert "KeyboardInterrupt" in stderr
    assert stopped_in < 2  # connections are cut, not waited out (the stall timeout is 10 s)
    assert json.loads(state.read_text())["done"]
    assert files_under(tmp_path / "dest") == []


# -- sources, mirrors, hf:// -----------------------------------------------------------------------


def test_mirror_rewrite_is_tried_before_the_origin(mirror: Mirror, mirror2: Mirror, tmp_path: Path) -> None:
    data = blob(20 * KIB)
    mirror.add("/origin/f.bin", data)
    mirror2.add("/copy/f.bin", data)
    options = {"mirrors": parse_mirrors([f"{mirror.url('/origin/')}={mirror2.url('/copy/')}"])}
    record = fetch_one(make_asset(data, mirror.url("/origin/f.bin")), tmp_path, **options)
    assert record.source == mirror2.url("/copy/f.bin")
    assert mirror.requests["/origin/f.bin"] == 0


def test_origin_is_the_fallback_when_the_mirror_fails(
    mirror: Mirror, mirror2: Mirror, tmp_path: Path
) -> None:
    data = blob(20 * KIB)
    mirror.add("/origin/f.bin", data)
    options = {"mirrors": parse_mirrors([f"{mirror.url('/origin/')}={mirror2.url('/copy/')}"])}
    record = fetch_one(make_asset(data, mirror.url("/origin/f.bin")), tmp_path, **options)
    assert record.source == mirror.url("/origin/f.bin")
    assert mirror2.requests["/copy/f.bin"] == 1


def test_no_origin_never_touches_the_origin(mirror: Mirror, mirror2: Mirror, tmp_path: Path) -> None:
    data = blob(20 * KIB)
    mirror.add("/origin/f.bin", data)
    options = {
        "mirrors": parse_mirrors([f"{mirror.url('/origin/')}={mirror2.url('/copy/')}"]),
        "no_origin": True,
    }
    with pytest.raises(FetchFailed, match="HTTP 404"):
        fetch_one(make_asset(data, mirror.url("/origin/f.bin")), tmp_path, **options)
    assert sum(mirror.requests.values()) == 0
    assert mirror2.requests["/copy/f.bin"] == 1


@pytest.mark.parametrize("token_from", ["HF_TOKEN", "HF_TOKEN_FILE"])
def test_hf_source_resolves_through_hf_endpoint(
    mirror: Mirror, mirror2: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token_from: str
) -> None:
    pytest.importorskip("huggingface_hub")
    data = blob(3 * MIB)
    blob_path = mirror.add_hub_file(
        "FunAudioLLM/Fun-CosyVoice3-0.5B-2512", "main", "onnx/tok.onnx", data, cdn=mirror2, token="hf_secret"
    )
    monkeypatch.setenv("HF_ENDPOINT", mirror.base_url)
    if token_from == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
    else:
        (tmp_path / "token").write_text("hf_secret\n")
        monkeypatch.setenv("HF_TOKEN_FILE", str(tmp_path / "token"))
    url = "hf://FunAudioLLM/Fun-CosyVoice3-0.5B-2512@main/onnx/tok.onnx"
    record = fetch_one(make_asset(data, url), tmp_path)
    assert record.source == url
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert {e["authorization"] for e in mirror.log} == {"Bearer hf_secret"}
    assert mirror2.bytes_sent[blob_path] == len(data)
    assert {e["authorization"] for e in mirror2.log} == {None}  # the token never reaches the CDN


def test_hf_source_without_huggingface_hub_says_how_to_install(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(FetchFailed, match="pip install huggingface_hub"):
        fetch_one(make_asset(b"x", "hf://org/repo/file.bin"), tmp_path)


def test_file_url_source(tmp_path: Path) -> None:
    data = blob(100 * KIB)
    (tmp_path / "src.bin").write_bytes(data)
    record = fetch_one(make_asset(data, (tmp_path / "src.bin").as_uri()), tmp_path)
    assert record.bytes == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


class _ForwardProxy(BaseHTTPRequestHandler):
    """A plain-http forward proxy that counts what it relays."""

    protocol_version = "HTTP/1.1"
    seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        target = http.client.HTTPConnection(self.headers["Host"], timeout=5)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "proxy-authorization")}
        parts = urlsplit(self.path)
        target.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
        resp = target.getresponse()
        body = resp.read()
        self.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in ("transfer-encoding", "connection"):
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("bypass", [False, True], ids=["via-http-proxy", "no-proxy-bypasses"])
def test_http_proxy_and_no_proxy_are_honoured(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bypass: bool
) -> None:
    data = blob(20 * KIB)
    mirror.add("/f.bin", data)
    handler = type("Proxy", (_ForwardProxy,), {"seen": []})
    with LoopbackServer(handler) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url)
        if bypass:
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert handler.seen == ([] if bypass else [mirror.url("/f.bin")])
    assert [e["via_proxy"] for e in mirror.log] == [False]


class _ConnectProxy(BaseHTTPRequestHandler):
    """An https proxy: CONNECT host:port, then bytes both ways."""

    seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def do_CONNECT(self) -> None:
        self.seen.append(self.path)
        host, port = self.path.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)), timeout=5)
        self.send_response(200, "Connection established")
        self.end_headers()

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(upstream, self.connection), daemon=True)
        back.start()
        pump(self.connection, upstream)
        back.join(timeout=5)
        upstream.close()
        self.close_connection = True


def test_https_proxy_tunnels_with_connect(
    clean_net_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls_cert: tuple[str, str]
) -> None:
    data = blob(2 * MIB)
    handler = type("Proxy", (_ConnectProxy,), {"seen": []})
    with LoopbackServer(handler) as proxy, Mirror({"/f.bin": data}, tls=tls_cert) as secure:
        monkeypatch.setenv("HTTPS_PROXY", proxy.base_url)
        fetch_one(make_asset(data, secure.url("/f.bin")), tmp_path, ca_bundle=tls_cert[0], connections=2)
        target = secure.base_url.removeprefix("https://")
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data
    assert handler.seen and set(handler.seen) == {target}  # every connection went through the tunnel


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.mark.parametrize("trust", ["ca-bundle-option", "ssl-cert-file-env", "untrusted"])
def test_https_with_custom_ca(
    clean_net_env: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tls_cert: tuple[str, str],
    trust: str,
) -> None:
    data = blob(2 * MIB)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    overrides: dict = {}
    if trust == "ca-bundle-option":
        overrides["ca_bundle"] = tls_cert[0]
    elif trust == "ssl-cert-file-env":
        monkeypatch.setenv("SSL_CERT_FILE", tls_cert[0])
    with Mirror({"/f.bin": data}, tls=tls_cert) as secure:
        asset = make_asset(data, secure.url("/f.bin"))
        if trust == "untrusted":
            with pytest.raises(FetchFailed, match=r"not trusted.*--ca-bundle"):
                fetch_one(asset, tmp_path, **overrides)
            return
        fetch_one(asset, tmp_path, **overrides)
        assert secure.bytes_sent["/f.bin"] == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


def test_missing_ca_bundle_is_a_usage_error(tmp_path: Path) -> None:
    asset = make_asset(b"x", "https://127.0.0.1:1/f.bin")
    with pytest.raises(UsageError, match="--ca-bundle"):
        fetch_one(asset, tmp_path, ca_bundle=str(tmp_path / "nope.pem"))


# -- candidate URLs and mirror specs -------------------------------------------------------------


@pytest.mark.parametrize(
    ("mirrors", "no_origin", "expected"),
    [
        pytest.param((), False, ["https://a.example/x/f", "https://b.example/f"], id="no-mirrors"),
        pytest.param(
            (("https://a.example/", "file:///srv/a/"),),
            False,
            ["file:///srv/a/x/f", "https://a.example/x/f", "https://b.example/f"],
            id="rewrite-first",
        ),
        pytest.param(
            (("https://a.example/", "file:///srv/a/"),), True, ["file:///srv/a/x/f"], id="no-origin"
        ),
        pytest.param(
            (("https://", "http://127.0.0.1:8/"),),
            False,
            [
                "http://127.0.0.1:8/a.example/x/f",
                "http://127.0.0.1:8/b.example/f",
                "https://a.example/x/f",
                "https://b.example/f",
            ],
            id="every-rewrite-before-origins",
        ),
    ],
)
def test_candidate_urls(tmp_path: Path, mirrors: tuple, no_origin: bool, expected: list[str]) -> None:
    asset = make_asset(b"x", "https://a.example/x/f", "https://b.example/f")
    assert candidate_urls(asset, opts(tmp_path, mirrors=mirrors, no_origin=no_origin)) == expected


def test_no_origin_without_a_matching_mirror_is_a_usage_error(tmp_path: Path) -> None:
    asset = make_asset(b"x", "https://a.example/f")
    with pytest.raises(UsageError, match="no mirror prefix matches"):
        candidate_urls(asset, opts(tmp_path, mirrors=(("https://other/", "file:///m/"),), no_origin=True))


@pytest.mark.parametrize("allow_http", [False, True])
def test_mirror_to_plain_http_needs_allow_http(tmp_path: Path, allow_http: bool) -> None:
    asset = make_asset(b"x", "https://a.example/f")
    options = opts(
        tmp_path, mirrors=(("https://a.example/", "http://mirror.example/"),), allow_http=allow_http
    )
    if allow_http:
        assert candidate_urls(asset, options)[0] == "http://mirror.example/f"
    else:
        with pytest.raises(ManifestError, match="allow-http"):
            candidate_urls(asset, options)


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        pytest.param(["https://a/=https://m/a/"], (("https://a/", "https://m/a/"),), id="one"),
        pytest.param(
            ["https://a/=file:///m/ https://b/=http://127.0.0.1:9/b/"],
            (("https://a/", "file:///m/"), ("https://b/", "http://127.0.0.1:9/b/")),
            id="env-style",
        ),
        pytest.param(["", "  "], (), id="empty"),
        pytest.param(
            ["https://a/=https://m/?k=v"], (("https://a/", "https://m/?k=v"),), id="first-equals-splits"
        ),
    ],
)
def test_parse_mirrors(specs: list[str], expected: tuple) -> None:
    assert parse_mirrors(specs) == expected


@pytest.mark.parametrize("spec", ["no-equals", "=https://m/", "https://a/=", "https://a/=ftp://m/"])
def test_parse_mirrors_rejects(spec: str) -> None:
    with pytest.raises(UsageError, match="mirror"):
        parse_mirrors([spec])


# -- cache and destination ---------------------------------------------------------------------


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


def test_existing_verified_dest_costs_no_request(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    (tmp_path / "dest/data").mkdir(parents=True)
    (tmp_path / "dest/data/blob.bin").write_bytes(data)
    record = fetch_one(make_asset(data, mirror.url("/absent.bin")), tmp_path)
    assert sum(mirror.requests.values()) == 0
    assert record.cached and record.source == "cache"


def test_existing_wrong_dest_file_is_replaced(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(50 * KIB)
    mirror.add("/f.bin", data)
    (tmp_path / "dest/data").mkdir(parents=True)
    (tmp_path / "dest/data/blob.bin").write_bytes(b"stale")
    fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data


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


def test_dest_holds_only_verified_files_after_failures(mirror: Mirror, tmp_path: Path) -> None:
    good, bad, gone = blob(40 * KIB, b"g"), blob(40 * KIB, b"b"), blob(40 * KIB, b"x")
    mirror.add("/good", good)
    mirror.add("/bad", bad)
    mirror.script("/bad", wrong_bytes())
    assets = [
        make_asset(good, mirror.url("/good"), name="good", path="a/good.bin"),
        make_asset(bad, mirror.url("/bad"), name="bad", path="a/bad.bin"),
        make_asset(gone, mirror.url("/gone"), name="gone", path="b/gone.bin"),
    ]
    with pytest.raises(FetchFailed) as info:
        fetch_assets(assets, tmp_path / "dest", opts(tmp_path))
    assert set(info.value.failures) == {"bad", "gone"}
    assert [r.name for r in info.value.records] == ["good"]
    assert "2 of 3 asset(s)" in str(info.value)
    assert files_under(tmp_path / "dest") == ["a/good.bin"]


def test_symlink_out_of_dest_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest/data").symlink_to(tmp_path / "outside")
    with pytest.raises(FetchFailed, match="outside --dest"):
        fetch_one(make_asset(b"x", mirror.url("/f.bin")), tmp_path)
    assert list((tmp_path / "outside").iterdir()) == []


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


# -- disk full, deadline, progress -------------------------------------------------------------------


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


def test_deadline_is_respected(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(100 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", *[stall(10 * KIB, 30)] * 5)
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="deadline of 1 s"):
        fetch_one(make_asset(data, mirror.url("/f.bin")), tmp_path, timeout=20, deadline=1)
    assert time.monotonic() - started < 2


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


# -- issue 37: a wrong sha256 costs one download; dests never share a file ------------------------------


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


def test_two_dests_never_share_a_file(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(64 * KIB)
    mirror.add("/f.bin", data)
    asset = make_asset(data, mirror.url("/f.bin"))
    for dest in ("one", "two"):
        fetch_assets([asset], tmp_path / dest, opts(tmp_path))
    one, two = tmp_path / "one/data/blob.bin", tmp_path / "two/data/blob.bin"
    obj = tmp_path / "cache/objects" / asset.sha256
    assert len({os.stat(p).st_ino for p in (one, two, obj)}) == 3
    with open(one, "r+b") as f:  # an edit in place, as root makes it whatever the mode
        f.write(b"edited")
    assert two.read_bytes() == data and obj.read_bytes() == data

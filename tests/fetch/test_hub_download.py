"""The Guard on huggingface_hub's answers: only the pinned commit, ETag and size pass; 5xx go to bake's retry;
every request is bounded by the stall timeout and the deadline. And which sources are pinned Hub files."""

from __future__ import annotations

import threading
import time

import httpx2
import pytest

from bake.asset import Asset
from bake.errors import DownloadError
from bake.fetch.clock import Clock
from bake.fetch.failures import Cancelled, DeadlineExceeded
from bake.fetch.hub_download import Guard, HubFile, hub_file
from bake.hub.entry import HubBlob, HubEntry

COMMIT = "c" * 40
ETAG = "e" * 64
URL = f"hf://org/model@{COMMIT}/onnx/tok.onnx"
FILE = HubFile("org/model", "model", COMMIT, "onnx/tok.onnx", ETAG, 1000, URL)
RESOLVE = f"https://hub.example/org/model/resolve/{COMMIT}/onnx/tok.onnx"


def guard(*, timeout: float = 5.0, deadline: float | None = None) -> Guard:
    clock = Clock("tok", timeout=timeout, deadline=deadline, cancel=threading.Event())
    clock.start()
    return Guard(FILE, clock, lambda n: None)


def answer(status: int, headers: dict[str, str], url: str = RESOLVE) -> httpx2.Response:
    return httpx2.Response(status, headers=headers, request=httpx2.Request("GET", url))


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"X-Repo-Commit": COMMIT, "ETag": f'"{ETAG}"', "Content-Length": "1000"}, id="pinned"),
        pytest.param(
            {"X-Linked-Etag": f'W/"{ETAG}"', "X-Linked-Size": "1000", "ETag": '"other"'}, id="linked"
        ),
        pytest.param({}, id="nothing-to-check"),
    ],
)
def test_an_answer_naming_the_pinned_file_passes(headers: dict[str, str]) -> None:
    guard().check(answer(200, headers))


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        pytest.param({"X-Repo-Commit": "d" * 40}, "commit", id="another-commit"),
        pytest.param({"X-Repo-Commit": "../../etc"}, "commit", id="a-path-for-a-commit"),
        pytest.param({"ETag": '"' + "f" * 64 + '"'}, "ETag", id="another-blob"),
        pytest.param({"X-Linked-Etag": "../blob"}, "ETag", id="a-path-for-an-etag"),
        pytest.param({"X-Xet-Hash": "not-hex"}, "X-Xet-Hash", id="bad-xet-hash"),
        pytest.param({"Content-Length": "999"}, "size", id="another-size"),
        pytest.param({"X-Linked-Size": "1e3"}, "size", id="a-size-not-digits"),
    ],
)
def test_an_answer_that_is_not_the_pinned_file_is_refused(headers: dict[str, str], field: str) -> None:
    with pytest.raises(DownloadError, match=f"has {field} .*Nothing was downloaded or written") as info:
        guard().check(answer(200, headers))
    assert not info.value.retryable


def test_the_cdns_own_etag_and_length_are_not_checked() -> None:
    guard().check(answer(200, {"ETag": '"cdn-etag"', "Content-Length": "5"}, "https://cdn.example/x/blob"))


@pytest.mark.parametrize(("status", "retried"), [(503, True), (429, True), (500, True), (404, False)])
def test_server_errors_go_to_bakes_retry(status: int, retried: bool) -> None:
    if not retried:
        guard().check(answer(status, {}))  # huggingface_hub names a 404 itself
        return
    with pytest.raises(DownloadError, match=f"HTTP {status} from {RESOLVE}: server error") as info:
        guard().check(answer(status, {}))
    assert info.value.retryable


def test_each_request_gets_the_stall_timeout_cut_short_by_the_deadline() -> None:
    request = httpx2.Request("GET", RESOLVE)
    guard(timeout=5.0, deadline=100.0).before(request)
    assert request.extensions["timeout"] == dict.fromkeys(("connect", "read", "write", "pool"), 5.0)
    late = guard(timeout=5.0, deadline=0.01)
    time.sleep(0.02)
    with pytest.raises(DeadlineExceeded, match="through huggingface_hub"):
        late.before(httpx2.Request("GET", RESOLVE))


def test_a_cancelled_guard_stops_the_next_read() -> None:
    stopped = guard()
    stopped.check_running()
    stopped.fail(Cancelled("interrupted"))
    with pytest.raises(Cancelled):
        stopped.check_running()


def test_a_body_may_be_the_pinned_file_or_a_small_error_page() -> None:
    assert guard().body_limit() == 1000 + 64 * 1024


def test_only_a_pinned_hub_blobs_own_urls_are_hub_files() -> None:
    entry = HubEntry("org/model", "model", COMMIT, ())
    blob = HubBlob("models--org--model", ETAG, ((entry, "onnx/tok.onnx"),))
    asset = Asset("tok", "hub/models--org--model/blobs/" + ETAG, "a" * 64, (URL,), 1000, hub=blob)
    assert hub_file(asset, URL) == FILE
    assert hub_file(asset, "https://mirror.example/tok.onnx") is None
    assert hub_file(Asset("tok", "tok.onnx", "a" * 64, (URL,), 1000), URL) is None

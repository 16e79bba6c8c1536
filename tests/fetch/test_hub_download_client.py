"""huggingface_hub's HTTP client under the Guard, against a loopback mirror: unchanged outside an attempt;
inside one, every answer checked, every body counted and bounded, stalls and broken links as bake's errors."""

from __future__ import annotations

import ssl
import threading

import pytest

from bake.errors import DownloadError
from bake.fetch import hub_download_client  # needs huggingface_hub, a [test] dependency: missing is a failure
from bake.fetch.clock import Clock
from bake.fetch.failures import Cancelled
from bake.fetch.hub_download import Guard, HubFile
from tests.fetch.conftest import KIB, blob
from tests.mirror import Mirror, http_error, reset, stall


class Attempt:
    """The guard of the attempt running now, as huggingface_hub's client finds it, and the bytes it let by."""

    def __init__(self, mirror: Mirror, path: str, size: int, *, timeout: float = 5.0) -> None:
        self.seen = 0
        clock = Clock("tok", timeout=timeout, deadline=None, cancel=threading.Event())
        clock.start()
        file = HubFile("org/model", "model", "c" * 40, "tok.onnx", "e" * 64, size, mirror.url(path))
        self.guard: Guard | None = Guard(file, clock, self.count)
        self.client = hub_download_client.factory(ssl.create_default_context, lambda: self.guard)()

    def count(self, n: int) -> None:
        self.seen += n


def test_outside_an_attempt_the_client_is_unchanged(mirror: Mirror) -> None:
    data = blob(100 * KIB)
    mirror.add("/f.bin", data)
    attempt = Attempt(mirror, "/f.bin", 1)  # a guard would refuse 100 KiB for a 1-byte file
    attempt.guard = None
    assert attempt.client.get(mirror.url("/f.bin")).content == data


def test_inside_an_attempt_every_byte_passes_the_guard(mirror: Mirror) -> None:
    data = blob(300 * KIB)
    mirror.add("/f.bin", data)
    attempt = Attempt(mirror, "/f.bin", len(data))
    assert attempt.client.get(mirror.url("/f.bin")).content == data
    assert attempt.seen == len(data)


def test_a_body_past_the_pinned_size_is_cut_off(mirror: Mirror) -> None:
    mirror.add("/f.bin", blob(200 * KIB))
    attempt = Attempt(mirror, "/f.bin", 10)
    with pytest.raises(DownloadError, match=f"ran past {10 + 64 * KIB} bytes") as info:
        attempt.client.get(mirror.url("/f.bin"))
    assert not info.value.retryable and attempt.seen <= 10 + 64 * KIB


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        pytest.param(http_error(503), "HTTP 503 from .*: server error", id="503"),
        pytest.param(stall(10 * KIB, 5), r"no data for 0.5 s while reading the body \(stalled\)", id="stall"),
        pytest.param(reset(10 * KIB), "connection broke", id="reset"),
    ],
)
def test_failures_become_bakes_retryable_errors(mirror: Mirror, fault, says: str) -> None:
    data = blob(100 * KIB)
    mirror.add("/f.bin", data)
    mirror.script("/f.bin", fault)
    attempt = Attempt(mirror, "/f.bin", len(data), timeout=0.5)
    with pytest.raises(DownloadError, match=says) as info:
        attempt.client.get(mirror.url("/f.bin"))
    assert info.value.retryable


def test_a_cancelled_attempt_sends_nothing(mirror: Mirror) -> None:
    mirror.add("/f.bin", b"x")
    attempt = Attempt(mirror, "/f.bin", 1)
    attempt.guard.fail(Cancelled("interrupted"))
    with pytest.raises(Cancelled):
        attempt.client.get(mirror.url("/f.bin"))
    assert mirror.requests["/f.bin"] == 0

"""What a run's transfers share: Ctrl-C stops them all, even one that registers late; one TLS context."""

from __future__ import annotations

import hashlib
import json
import signal
import ssl
import time
from pathlib import Path

import pytest

from bake.cache import Cache
from bake.errors import UsageError
from bake.fetch.failures import Cancelled
from bake.fetch.options import FetchOptions
from bake.fetch.partial import PartialFile
from bake.fetch.session import Session
from bake.fetch.transfer import Transfer
from tests.fetch.conftest import MIB, blob, child, files_under
from tests.mirror import Mirror


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


def transfer(tmp_path: Path, key: str = "a" * 64) -> Transfer:
    cache = Cache(tmp_path / "cache")
    cache.ensure()
    return Transfer(PartialFile(cache, key, "vocab"), lambda nbytes: None)


def test_cancel_all_stops_every_registered_transfer(tmp_path: Path) -> None:
    session = Session(FetchOptions(cache_dir=tmp_path / "cache"))
    running, finished = transfer(tmp_path, "a" * 64), transfer(tmp_path, "b" * 64)
    session.register(running)
    session.register(finished)
    session.unregister(finished)
    session.cancel_all()
    assert session.cancel.is_set()
    assert running.aborted() and isinstance(running.error, Cancelled)
    assert not finished.aborted() and finished.error is None


def test_a_transfer_registered_after_cancel_stops_at_once(tmp_path: Path) -> None:
    session = Session(FetchOptions(cache_dir=tmp_path / "cache"))
    session.cancel_all()
    late = transfer(tmp_path)
    session.register(late)
    assert late.aborted() and isinstance(late.error, Cancelled)


def test_the_tls_context_is_made_once_and_shared(tmp_path: Path, clean_net_env: None) -> None:
    session = Session(FetchOptions(cache_dir=tmp_path / "cache"))
    context = session.ssl_context()
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert session.ssl_context() is context


@pytest.mark.parametrize("content", [None, "not a certificate\n"], ids=["missing", "not-pem"])
def test_a_bad_ca_bundle_is_a_usage_error_when_the_context_is_made(
    tmp_path: Path, content: str | None
) -> None:
    bundle = tmp_path / "ca.pem"
    if content is not None:
        bundle.write_text(content)
    session = Session(FetchOptions(cache_dir=tmp_path / "cache", ca_bundle=str(bundle)))
    with pytest.raises(UsageError, match=r"--ca-bundle .*ca\.pem: cannot load it as a CA bundle"):
        session.ssl_context()

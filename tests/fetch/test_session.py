"""What a run's transfers share: Ctrl-C stops them all at once, one TLS context."""

from __future__ import annotations

import hashlib
import json
import signal
import time
from pathlib import Path

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

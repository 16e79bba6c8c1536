"""bake.testing.test_image, the standard assertions, without an engine: the signal job on its own, and
the checks collected and run with ``--bake-local`` on an asset root in tmp_path.

Against a real image they run in tests/image/test_plugin.py; on a sealed directory after the
runner's line, in tests/test_testing.py.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
from pathlib import Path

from bake.testing.test_image import READY, SIGNAL_JOB, TERMINATED
from tests.runners import pytest_run

VOCAB = b"vocab bytes\n"


def test_the_signal_job_says_it_is_ready_and_exits_42_on_sigterm() -> None:
    job = subprocess.Popen(SIGNAL_JOB, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == f"{READY}\n"
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=10) == 42
        assert job.stdout.read() == f"{TERMINATED}\n"
    finally:
        job.kill()
        job.wait()


def asset_root(tmp_path: Path, data: bytes) -> Path:
    """An asset root of one tiktoken file whose lock records VOCAB; sealed before bake.serve existed."""
    root = tmp_path / "assets"
    (root / "tiktoken").mkdir(parents=True)
    (root / "tiktoken/abc").write_bytes(data)
    (root / "tiktoken/abc").chmod(0o444)
    entry = {"path": "tiktoken/abc", "size": len(VOCAB), "sha256": hashlib.sha256(VOCAB).hexdigest()}
    (root / "bake.lock.json").write_text(
        json.dumps({"version": 1, "manifest_digest": "m", "assets": [entry]})
    )
    return root


def test_each_asset_and_each_location_is_its_own_test_named_after_it(tmp_path: Path) -> None:
    root = asset_root(tmp_path, VOCAB)
    proc = pytest_run(
        tmp_path, "--pyargs", "bake.testing", "--bake-local", "--collect-only", "-q", BAKE_ASSETS=str(root)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collected = {line.rpartition("::")[2] for line in proc.stdout.splitlines() if "::" in line}
    assert {
        "test_asset[tiktoken/abc]",
        "test_location_is_served[tiktoken.0:$TIKTOKEN_RS_CACHE_DIR]",
        "test_location_is_served[tiktoken.1:$TIKTOKEN_CACHE_DIR]",
        "test_hub_repository_resolves_offline[no-hub-repository]",
        "test_secret_pattern_is_in_no_layer[no-pattern]",
    } <= collected


def test_an_asset_with_other_bytes_fails_naming_its_sha256_and_what_to_do(tmp_path: Path) -> None:
    root = asset_root(tmp_path, VOCAB.upper())
    proc = pytest_run(
        tmp_path, "--pyargs", "bake.testing", "--bake-local", "-k", "test_asset[", BAKE_ASSETS=str(root)
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    seen = hashlib.sha256(VOCAB.upper()).hexdigest()
    expected = hashlib.sha256(VOCAB).hexdigest()
    assert f"tiktoken/abc ({root}/tiktoken/abc): sha256 {seen}, expected {expected}" in proc.stdout
    assert "rebuild the image's asset layer" in proc.stdout

"""Process control: start, wait for and stop what the bench runs (by pid), and the loopback mirror."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import BenchError


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM the process we started, by its pid; SIGKILL it if it outlives ``timeout``."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, what: str, proc: subprocess.Popen, log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise BenchError(f"{what} exited during start-up (exit {proc.returncode}); see {log_path}")
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not come up within {timeout:g} s; see {log_path}")
        time.sleep(0.1)


def run(cmd: Sequence[str], *, log_path: Path, cwd: Path, env: dict[str, str] | None = None) -> float:
    """Run ``cmd`` with its output in ``log_path``; return its wall seconds. Raises BenchError on failure."""
    with open(log_path, "ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise BenchError(
            f"`{' '.join(cmd[:6])} …` exited {proc.returncode}; end of {log_path}:\n" + "\n".join(tail)
        )
    return seconds


@dataclass
class Served:
    """A running mirror; ``bytes_sent`` (server-side, per path) is filled in when it stops."""

    url: str = ""
    bytes_sent: dict[str, int] = field(default_factory=dict)

    def sent(self, path: str) -> int:
        return self.bytes_sent.get("/" + path, 0)


@contextlib.contextmanager
def mirror(
    src: Path, root: Path, logs: Path, *, port: int = 0, rate: int | None = None, drop_at: float | None = None
) -> Iterator[Served]:
    """Run ``python -m tests.mirror`` (the snapshot's) over ``root`` until the block ends."""
    state = Path(tempfile.mkdtemp(prefix="mirror-", dir=logs))
    cmd = [sys.executable, "-m", "tests.mirror", "--root", str(root), "--port", str(port)]
    cmd += ["--port-file", str(state / "port"), "--stats-file", str(state / "stats.json")]
    if rate:
        cmd += ["--rate", str(rate)]
    if drop_at is not None:
        cmd += ["--drop-at", str(drop_at)]
    served = Served()
    log_path = state / "mirror.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: (state / "port").is_file(), "the mirror", proc, log_path)
        served.url = f"http://127.0.0.1:{(state / 'port').read_text().strip()}"
        yield served
    finally:
        stop(proc)
        stats = state / "stats.json"
        if stats.is_file():
            served.bytes_sent = json.loads(stats.read_text())["bytes_sent"]


@contextlib.contextmanager
def hub_server(src: Path, spec: Path, logs: Path) -> Iterator[str]:
    """Run ``python -m tests.hub_server`` (the snapshot's loopback Hub) over ``spec`` until the block
    ends; yield its endpoint, for HF_ENDPOINT. The server re-reads ``spec`` when it changes."""
    state = Path(tempfile.mkdtemp(prefix="hub-", dir=logs))
    cmd = [sys.executable, "-m", "tests.hub_server", "--spec", str(spec), "--port-file", str(state / "ports")]
    log_path = state / "hub.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: (state / "ports").is_file(), "the loopback Hub", proc, log_path)
        yield f"http://127.0.0.1:{json.loads((state / 'ports').read_text())['hub']}"
    finally:
        stop(proc)

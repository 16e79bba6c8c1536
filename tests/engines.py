"""A second dockerd for the image tests: its own empty data root, the classic or the containerd image store.

The main engine and its stand-in bases stay untouched. Stopped by its pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker as docker_sdk


@dataclass
class SecondEngine:
    """The engine's client, its image store, and where its containerd listens (for ``ctr``)."""

    client: docker_sdk.DockerClient
    store: str
    containerd: Path
    namespace: str


@contextlib.contextmanager
def second_engine(dockerd: str, work: Path, store: str, namespace: str) -> Iterator[SecondEngine]:
    """Start ``dockerd`` in ``work`` with the ``store`` image store ("classic" or "containerd").

    ``work`` must be short: containerd's sockets under it hold at most 104 bytes of path."""
    work.mkdir(parents=True, exist_ok=True)
    sock = work / "d.sock"
    config = work / "daemon.json"
    config.write_text(json.dumps({"features": {"containerd-snapshotter": store == "containerd"}}))
    # fmt: off
    cmd = [dockerd, "--config-file", str(config), "--data-root", str(work / "data"),
           "--exec-root", str(work / "exec"), "--pidfile", str(work / "d.pid"), "--host", f"unix://{sock}",
           "--bridge=none", "--iptables=false", "--ip6tables=false",
           "--containerd-namespace", namespace, "--containerd-plugins-namespace", f"{namespace}-plugins"]
    # fmt: on
    with open(work / "dockerd.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(300):
            assert proc.poll() is None, (work / "dockerd.log").read_text()[-3000:]
            try:
                client = docker_sdk.DockerClient(base_url=f"unix://{sock}", timeout=300)
                client.ping()
                break
            except docker_sdk.errors.DockerException:
                time.sleep(0.1)
        yield SecondEngine(client, store, work / "exec/containerd/containerd.sock", namespace)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)

"""Crashes through the real CLI: SIGKILL mid-transfer resumes with little re-fetched; bad cache never lands.

Progress is read the way a rerun reads it, from the cache's progress record, and bytes are counted
by the mirror (server side).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import (
    INDEX_FILES,
    MIB,
    REPO,
    asset_entry,
    bake,
    bake_command,
    blob,
    cli_env,
    files_under,
    manifest_text,
    sha256,
)

DATA = blob(16 * MIB + 7, "crash")
SHA = sha256(DATA)
TARGET = "m/model.onnx"


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    with Mirror({"/model.onnx": DATA}) as m:
        yield m


def write_manifest(tmp_path: Path, mirror: Mirror, data: bytes = DATA) -> Path:
    path = tmp_path / "assets.toml"
    path.write_text(manifest_text([asset_entry("model", TARGET, data, mirror.url("/model.onnx"))]))
    return path


def start_fetch(manifest: Path, dest: Path, cache: Path, connections: int) -> subprocess.Popen[str]:
    args = ["fetch", "--manifest", manifest, "--dest", dest, "--cache-dir", cache, "-q"]
    args += ["--connections", str(connections), "--timeout", "10"]
    return subprocess.Popen(
        bake_command(*args),
        env=cli_env(),
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def saved_progress(cache: Path) -> int:
    """Bytes the cache's progress record says are on disk (what a rerun would trust)."""
    try:
        state = json.loads((cache / f"partial/{SHA}.json").read_text())
    except (FileNotFoundError, ValueError):
        return 0
    return sum(end - start for start, end in state["done"])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("connections", "rate"), [(1, 4 * MIB), (4, MIB)], ids=["1-connection", "4-connections"]
)
def test_sigkill_at_half_then_the_rerun_resumes_and_refetches_little(
    tmp_path: Path, mirror: Mirror, connections: int, rate: int
) -> None:
    manifest, dest, cache = write_manifest(tmp_path, mirror), tmp_path / "dest", tmp_path / "cache"
    # Per connection: 4 MiB/s either way, so half takes two seconds and progress, saved every 0.25 s,
    # moves in steps of about 6%.
    mirror.rate = rate
    proc = start_fetch(manifest, dest, cache, connections)
    wait_for(lambda: saved_progress(cache) >= len(DATA) // 2 or proc.poll() is not None, "half the file")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, proc.stderr.read()  # else it ended on its own, too early
    at_kill = saved_progress(cache)
    time.sleep(0.2)  # let the mirror's senders notice the dead peer
    first = mirror.bytes_sent["/model.onnx"]
    assert files_under(dest) == []  # nothing unverified at the destination

    mirror.rate = None
    mirror.reset_counters()
    rerun = bake(
        "fetch",
        "--manifest",
        manifest,
        "--dest",
        dest,
        "--cache-dir",
        cache,
        "--connections",
        str(connections),
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming" in rerun.stderr
    assert sha256((dest / TARGET).read_bytes()) == SHA
    assert files_under(dest) == sorted([TARGET, *INDEX_FILES])
    refetched = first + mirror.bytes_sent["/model.onnx"] - len(DATA)
    assert 0.45 <= at_kill / len(DATA) <= 0.65, at_kill / len(DATA)
    assert refetched <= 0.10 * len(DATA), f"re-fetched {refetched / len(DATA):.1%} of the file"
    assert files_under(cache / "partial") == []


def flock_holder(lock: Path) -> int | None:
    """The pid holding an exclusive flock on ``lock``, from /proc/locks."""
    inode = os.stat(lock).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF"; a blocked waiter's line has "->".
        fields = line.split()
        held = "->" not in fields and fields[1:2] == ["FLOCK"] and fields[3] == "WRITE"
        if held and int(fields[5].rsplit(":", 1)[1]) == inode:
            return int(fields[4])
    return None


def test_sigkill_of_the_process_fetching_hands_the_partial_to_a_waiting_one(
    tmp_path: Path, mirror: Mirror
) -> None:
    manifest, cache = write_manifest(tmp_path, mirror), tmp_path / "cache"
    mirror.rate = 2 * MIB
    procs = [start_fetch(manifest, tmp_path / f"dest{i}", cache, 4) for i in range(4)]
    lock = cache / f"locks/{SHA}.lock"
    wait_for(lambda: saved_progress(cache) >= len(DATA) // 3, "a third of the file")
    holder = flock_holder(lock)
    assert holder in {p.pid for p in procs}
    os.kill(holder, signal.SIGKILL)
    victim = next(p for p in procs if p.pid == holder)
    assert victim.wait() == -signal.SIGKILL
    at_kill = saved_progress(cache)
    mirror.rate = None
    survivors = [p for p in procs if p is not victim]
    results = [(p.wait(timeout=60), p.stderr.read()) for p in survivors]
    assert [rc for rc, _ in results] == [0, 0, 0], results
    assert any("resuming" in err for _, err in results)  # a waiter took over the partial, not a fresh start
    for i, p in enumerate(procs):
        dest = tmp_path / f"dest{i}"
        expected = [] if p is victim else sorted([TARGET, *INDEX_FILES])
        assert files_under(dest) == expected
        if p is not victim:
            assert sha256((dest / TARGET).read_bytes()) == SHA
    refetched = mirror.bytes_sent["/model.onnx"] - len(DATA)
    assert at_kill >= len(DATA) // 3
    assert refetched <= 0.10 * len(DATA), f"re-fetched {refetched / len(DATA):.1%} of the file"


SMALL = blob(MIB + 7, "cached")


def corrupt_object(how: str) -> Callable[[Path], None]:
    def apply(obj: Path) -> None:
        if how == "byte-flipped-in-place":
            with open(obj, "r+b") as fh:
                fh.seek(len(SMALL) // 2)
                fh.write(bytes([SMALL[len(SMALL) // 2] ^ 0xFF]))
        elif how == "truncated-in-place":
            os.truncate(obj, len(SMALL) // 2)
        elif how == "swapped-for-other-bytes":
            obj.unlink()
            obj.write_bytes(blob(len(SMALL), "impostor"))
        else:
            obj.unlink()
            obj.write_bytes(b"")

    return apply


def plant_partial(how: str, etag: str, url: str) -> Callable[[Path], None]:
    """Replace the verified object by a partial that claims too much, in one way or another."""
    half = len(SMALL) // 2

    def apply(obj: Path) -> None:
        partial = obj.parent.parent / "partial" / obj.name
        state = {"version": 1, "size": len(SMALL), "url": url, "etag": etag, "done": [[0, len(SMALL)]]}
        if how == "complete-but-wrong":
            partial.write_bytes(blob(len(SMALL), "impostor"))
        elif how == "half-wrong":
            partial.write_bytes(blob(half, "impostor") + bytes(len(SMALL) - half))
            state["done"] = [[0, half]]
        elif how == "record-claims-bytes-the-file-lacks":
            partial.write_bytes(SMALL[:half])
        else:
            partial.write_bytes(SMALL)
            state = "{not json"
        partial.with_name(obj.name + ".json").write_text(
            state if isinstance(state, str) else json.dumps(state)
        )
        obj.unlink()

    return apply


# case -> bytes the fetch after the damage must pull from the mirror (the damaged entry is never used)
DAMAGE = {
    "object-byte-flipped-in-place": len(SMALL),
    "object-truncated-in-place": len(SMALL),
    "object-swapped-for-other-bytes": len(SMALL),
    "object-empty": len(SMALL),
    "partial-complete-but-wrong": len(SMALL),
    # Resumed bytes fail the hash: one clean try from zero follows.
    "partial-half-wrong": len(SMALL) - len(SMALL) // 2 + len(SMALL),
    "partial-record-claims-bytes-the-file-lacks": len(SMALL),
    "partial-record-unreadable": len(SMALL),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_cache_entry_is_never_installed(tmp_path: Path, case: str) -> None:
    with Mirror({"/model.onnx": SMALL}) as m:
        manifest, cache = write_manifest(tmp_path, m, SMALL), tmp_path / "cache"
        first = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "one", "--cache-dir", cache)
        assert first.returncode == 0, first.stderr
        obj = cache / "objects" / sha256(SMALL)
        kind, _, how = case.partition("-")
        if kind == "object":
            corrupt_object(how)(obj)
        else:
            plant_partial(how, m.files["/model.onnx"].etag, m.url("/model.onnx"))(obj)
        m.reset_counters()
        again = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "two", "--cache-dir", cache)
        fetched = m.bytes_sent["/model.onnx"]
        # The first destination holds a hard link to the object: damage in place reached it too.
        repair = bake("fetch", "--manifest", manifest, "--dest", tmp_path / "one", "--cache-dir", cache)
    assert again.returncode == 0, again.stderr
    assert repair.returncode == 0, repair.stderr
    assert sha256((tmp_path / "one" / TARGET).read_bytes()) == sha256(SMALL)
    assert sha256((tmp_path / "two" / TARGET).read_bytes()) == sha256(SMALL)
    assert files_under(tmp_path / "two") == sorted([TARGET, *INDEX_FILES])
    assert sha256(obj.read_bytes()) == sha256(SMALL)
    assert fetched == DAMAGE[case]
    assert files_under(cache / "partial") == []


@pytest.mark.parametrize("owner", ["killed", "running"])
def test_staging_file_is_cleared_only_when_its_process_is_gone(tmp_path: Path, owner: str) -> None:
    if owner == "killed":
        dead = subprocess.Popen(["true"])
        dead.wait()
        pid = dead.pid
    else:
        pid = os.getpid()
    staging = tmp_path / "dest" / f"m/.model.onnx.bake-staging.{socket.gethostname()}.{pid}.0"
    staging.parent.mkdir(parents=True)
    staging.write_bytes(b"half a copy, cut short by SIGKILL")
    with Mirror({"/model.onnx": SMALL}) as m:
        manifest = write_manifest(tmp_path, m, SMALL)
        proc = bake(
            "fetch", "--manifest", manifest, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "cache"
        )
    assert proc.returncode == 0, proc.stderr
    assert staging.exists() == (owner == "running")
    assert sha256((tmp_path / "dest" / TARGET).read_bytes()) == sha256(SMALL)

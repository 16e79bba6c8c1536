"""A server's word reserves no disk: a partial holds about the bytes that arrived, and prune reclaims it.

Disk held is measured as the partial's st_blocks in the cache, the space the filesystem has
really given it (a sparse or preallocated file tells them apart from st_size).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.mirror import Mirror, claim_size, http_error, truncate

from . import (
    KIB,
    MIB,
    REPO,
    asset_entry,
    bake,
    bake_command,
    blob,
    cli_env,
    error_text,
    manifest_text,
    sha256,
)

CLAIM = 4 << 30  # what the lying server says the file holds
DATA = blob(MIB + 5, "reserve")
DATA_SIZE = len(DATA)
BIG = blob(24 * MIB + 7, "reserve-big")
SLACK = 512 * KIB  # filesystem blocks, one read buffer per connection, the progress record


def held(path: Path) -> int:
    """Bytes of disk the filesystem has given ``path``."""
    return path.stat().st_blocks * 512


def recorded(cache: Path, sha: str) -> int:
    """Bytes the partial's progress record says are on disk."""
    state = json.loads((cache / "partial" / f"{sha}.json").read_text())
    return sum(end - start for start, end in state["done"])


def fetch(tmp_path: Path, entry: dict, *args: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(manifest_text([entry]))
    common = ["--dest", tmp_path / "dest", "--cache-dir", tmp_path / "cache", "--timeout", "1"]
    return bake("fetch", "--manifest", manifest, *common, "--deadline", "30", *args)


def freed(stdout: str) -> float:
    """The MiB `bake cache prune` says it freed."""
    match = re.search(r"freed ([0-9.]+) MiB", stdout)
    assert match, stdout
    return float(match.group(1))


@pytest.mark.parametrize("connections", ["1", "4"])
def test_a_claimed_size_reserves_nothing_and_prune_reclaims_the_partial(
    tmp_path: Path, connections: str
) -> None:
    with Mirror({"/f.bin": DATA}) as m:
        m.script("/f.bin", *[claim_size(CLAIM)] * 200)  # every answer claims 4 GiB and sends 1 MiB
        entry = asset_entry("liar", "x/liar.bin", DATA, m.url("/f.bin"), size=False)
        proc = fetch(tmp_path, entry, "--attempts", "2", "--connections", connections)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "asset 'liar'" in error_text(proc.stderr)
    partial = tmp_path / "cache/partial" / sha256(DATA)
    before = held(partial) if partial.exists() else 0
    assert before <= DATA_SIZE + SLACK, (
        f"the partial holds {before} bytes of disk for {DATA_SIZE} that arrived"
    )
    if connections == "4":
        return  # which connection fails first decides whether any byte landed: the rest needs one stream
    assert partial.exists(), "the partial is kept for a rerun to resume"

    prune = bake("cache", "prune", "--cache-dir", tmp_path / "cache", "--max-age", "0")
    assert prune.returncode == 0, prune.stderr
    assert not partial.exists()
    # It reports the disk it gave back, not the size the server claimed.
    assert freed(prune.stdout) <= (before + SLACK) / MIB


@pytest.mark.parametrize("connections", ["1", "4"])
def test_a_failed_partial_of_a_vouched_size_holds_about_what_arrived(
    tmp_path: Path, connections: str
) -> None:
    with Mirror({"/f.bin": BIG}) as m:
        # The first answer on each connection is cut after 1 MiB; every later one is refused for good.
        m.script("/f.bin", *[truncate(MIB)] * int(connections), *[http_error(403)] * 20)
        proc = fetch(
            tmp_path, asset_entry("big", "x/big.bin", BIG, m.url("/f.bin")), "--connections", connections
        )
    assert proc.returncode == 3, proc.stderr
    partial = tmp_path / "cache/partial" / sha256(BIG)
    have = recorded(tmp_path / "cache", sha256(BIG))
    assert 0 < have < len(BIG)
    assert held(partial) <= have + SLACK, f"{held(partial)} bytes of disk held for {have} bytes arrived"


def test_a_killed_fetch_leaves_a_partial_holding_about_what_arrived(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    with Mirror({"/f.bin": BIG}, rate=1 * MIB) as m:
        manifest.write_text(manifest_text([asset_entry("big", "x/big.bin", BIG, m.url("/f.bin"))]))
        args = [
            "fetch",
            "--manifest",
            manifest,
            "--dest",
            tmp_path / "dest",
            "--cache-dir",
            tmp_path / "cache",
        ]
        proc = subprocess.Popen(bake_command(*args), env=cli_env(), cwd=REPO, stderr=subprocess.DEVNULL)
        try:
            partial = tmp_path / "cache/partial" / sha256(BIG)
            deadline = time.monotonic() + 30
            while m.bytes_sent["/f.bin"] < 2 * MIB and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        sent = m.bytes_sent["/f.bin"]
    assert 0 < sent < len(BIG)
    assert held(partial) <= sent + SLACK, f"{held(partial)} bytes of disk held; the mirror sent {sent}"


def test_prune_gives_back_what_an_old_partial_reserved_beyond_its_bytes(tmp_path: Path) -> None:
    """A partial left by an earlier bake that preallocated: prune trims it, and a rerun still resumes."""
    cache = tmp_path / "cache"
    (cache / "partial").mkdir(parents=True)
    sha = sha256(BIG)
    partial = cache / "partial" / sha
    with open(partial, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, len(BIG))  # an earlier bake reserved the whole file ...
        fh.write(BIG[:MIB])  # ... and received its first MiB
    state = {"version": 1, "size": len(BIG), "url": None, "etag": None, "done": [[0, MIB]]}
    (cache / "partial" / f"{sha}.json").write_text(json.dumps(state))
    assert held(partial) >= len(BIG)

    prune = bake("cache", "prune", "--cache-dir", cache, "--max-age", "7")  # keeps a young partial ...
    assert prune.returncode == 0, prune.stderr
    assert partial.exists() and held(partial) <= MIB + SLACK  # ... but not the disk it never used
    assert freed(prune.stdout) >= (len(BIG) - MIB - SLACK) / MIB

    with Mirror({"/f.bin": BIG}) as m:
        proc = fetch(tmp_path, asset_entry("big", "x/big.bin", BIG, m.url("/f.bin")))
        sent = m.bytes_sent["/f.bin"]
    assert proc.returncode == 0, proc.stderr
    assert sent <= len(BIG) - MIB, "the rerun resumed after the bytes prune kept"

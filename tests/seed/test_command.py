"""bake.seed.command: ``bake seed``'s one result line, its exit codes, and its end on a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runners import REPO, cli_env
from tests.seed.conftest import DECLARED
from tests.serve import content, sealed


def seed_cli(*args: str | Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bake", "seed", *map(str, args)],
        env=cli_env(env), cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_the_command_says_served_in_one_line_and_exits_0(assets: Path, tmp_path: Path) -> None:
    (tmp_path / "node").mkdir()
    done = seed_cli("--assets", assets, "--consumer", "nltk", tmp_path / "node")
    assert (done.returncode, done.stdout, done.stderr) == (
        0, f"served: copied 2 file(s), 1600 bytes, into {tmp_path / 'node'}\n", ""
    )  # fmt: skip


def test_the_command_says_left_as_is_or_served_job_local_and_exits_6(assets: Path, tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "planted").mkdir()
    os.mkfifo(tmp_path / "planted" / ".bake")
    left = seed_cli("--assets", assets, "--consumer", "nltk", "--no-copy", tmp_path / "ro")
    moved = seed_cli("--assets", assets, "--consumer", "nltk", tmp_path / "planted")
    assert (left.returncode, left.stdout.split(":")[0]) == (6, "left as is")
    assert (moved.returncode, moved.stdout.split(":")[0]) == (6, "served job-local")
    assert moved.stderr == (
        f"bake: warning: {tmp_path / 'planted'}: node storage where {tmp_path / 'planted'}/.bake is a FIFO, "
        "which is never followed or opened; served job-local for this job; remove it\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--consumer", "nltk"],
        ["--consumer", "nobody", "LOC"],
        ["--view", "T", "--consumer", "nltk", "LOC"],
    ],
    ids=["nothing", "no location", "an unknown consumer", "a view without --var"],
)
def test_usage_and_a_consumer_bake_serve_lacks_are_exit_2(
    assets: Path, tmp_path: Path, args: list[str]
) -> None:
    (tmp_path / "loc").mkdir()
    done = seed_cli("--assets", assets, *[str(tmp_path / "loc") if a == "LOC" else a for a in args])
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith("bake: error: ")
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_term_ends_a_copy_cleanly_removing_its_partial(assets: Path, tmp_path: Path) -> None:
    big = sealed({"nltk/big.bin": content("big", 64 * 1024 * 1024)}, declared=DECLARED)(tmp_path / "big")
    loc = tmp_path / "node"
    loc.mkdir()
    slow = _slow_disk(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bake", "seed", "--assets", str(big), "--consumer", "nltk", str(loc)],
        env=cli_env({"LD_PRELOAD": str(slow), "BAKE_TEST_SLOW_UNDER": str(loc), "BAKE_TEST_SLOW_MS": "300"}),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not list(loc.glob(".bake/partial.*/0")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM and (out, err) == ("", "")
    assert sorted(p.name for p in (loc / ".bake").iterdir()) == ["lock"]
    assert not (loc / "big.bin").exists()


def _slow_disk(tmp_path: Path) -> Path:
    from tests import nolock

    out = tmp_path / "shim"
    out.mkdir()
    return nolock.build(out, nolock.HERE / "slowwrite.c")

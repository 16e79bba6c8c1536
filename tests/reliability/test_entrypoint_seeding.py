"""Seeding node storage where the fleet's jobs really run it (issue 35's "Done when"), on the host, under
dash and busybox sh, on a loop-mounted ext4 filesystem standing for the shared volume:

- signals: TERM, then KILL, to the entrypoint's pid alone, and separately to its bake seed's pid
  alone, mid-copy: 5 s later none of its processes remain, and the next start serves from node
  storage within the stale bound plus the copy;
- locks that do not exclude (flock succeeds for every caller, tests/nolock/nolock.c): 8 jobs in two
  mount namespaces, 10 rounds, BAKE_REQUIRE=1: every start exits 0 served from node storage, no
  partial is left, no file is corrupt;
- clocks: a waiter's wall clock steps 60 s ahead and back (tests/nolock/clockstep.c): a live copier
  is never taken over;
- a stopped copier (SIGSTOP): its waiter is served from node storage within the bound; resumed, the
  copier ends quietly, saying truly what happened.

A copy stays in progress for as long as a case needs on a slow disk (tests/nolock/slowwrite.c).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import nolock
from tests.image import fail_or_skip
from tests.serve import Box, content, job_env, require, sealed, shell_and_box

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting an ext4 image needs root")

VOCAB = "tiktoken/fb374d419588a4632f3f557e76b4b70aebbca790"
# 24 MiB in 8 MiB blocks: three writes, each as slow as a case makes the disk.
FILES = {VOCAB: content("o200k", 24 * 1024 * 1024)}
URLS = {VOCAB: "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"}
NAME = VOCAB.split("/")[1]
SHA = hashlib.sha256(FILES[VOCAB]).hexdigest()


shell, box = shell_and_box(sealed(FILES, URLS), "volume")


@pytest.fixture
def node(box: Box) -> Path:
    """A location on the volume, as a runner points TIKTOKEN_RS_CACHE_DIR into a shared HF_HOME."""
    volume = nolock.ext4_volume(box.root, 256 * 1024 * 1024)
    volume.chmod(0o755)
    (volume / "hf" / "tiktoken-rs-cache").mkdir(parents=True)
    return volume / "hf" / "tiktoken-rs-cache"


@pytest.fixture(scope="module")
def shims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("shims")
    return {
        name: nolock.build(out, nolock.HERE / f"{name}.c") for name in ("nolock", "slowwrite", "clockstep")
    }


def preload(*parts: dict[str, str]) -> dict[str, str]:
    """The variables of several shims at once: their LD_PRELOAD joined."""
    env: dict[str, str] = {}
    for part in parts:
        env.update({k: v for k, v in part.items() if k != "LD_PRELOAD"})
    env["LD_PRELOAD"] = " ".join(part["LD_PRELOAD"] for part in parts)
    return env


def start(box: Box, node: Path, env: dict[str, str], **more: object) -> subprocess.Popen:
    """A job whose TIKTOKEN_RS_CACHE_DIR is ``node``, in a session of its own (signals reach only
    the pids a test names)."""
    return subprocess.Popen(
        box.argv("env"), env=box.env(TIKTOKEN_RS_CACHE_DIR=node, BAKE_REQUIRE=1, **env, **more),
        cwd=box.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def copying(node: Path, timeout: float = 30) -> None:
    """Return once a copy into ``node`` has begun: a partial holds a byte."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.stat().st_size for p in node.glob(".bake/partial.*/0")):
            return
        time.sleep(0.02)
    raise AssertionError(f"no copy began in {node}")


def child_of(pid: int) -> int:
    """The one child of ``pid``: the entrypoint's bake seed."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def served_from(
    result: subprocess.CompletedProcess[str] | tuple[int, str, str], node: Path, seen: Path | None = None
) -> None:
    """The job ran with exit 0, served from node storage (at ``seen``, in a namespace of its own): the
    variable as the runner set it, the file whole."""
    if isinstance(result, tuple):
        result = subprocess.CompletedProcess([], *result)
    assert job_env(result)["TIKTOKEN_RS_CACHE_DIR"] == str(seen or node), result.stderr
    assert "job-local" not in result.stderr and "warning" not in result.stderr, result.stderr
    assert hashlib.sha256((node / NAME).read_bytes()).hexdigest() == SHA


def no_partial(node: Path) -> None:
    assert not [
        p.name for p in (node / ".bake").iterdir() if p.name.startswith(("partial.", "stale.", "copying"))
    ]


# --- signals: TERM, then KILL, to one pid -----------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "signals", [(signal.SIGTERM, signal.SIGKILL), (signal.SIGKILL,)], ids=["TERM, KILL", "KILL"]
)
@pytest.mark.parametrize("target", ["the entrypoint", "bake seed"])
def test_a_signal_to_one_pid_leaves_no_process_and_the_next_start_serves(
    box: Box, node: Path, shims: dict[str, Path], target: str, signals: tuple[int, ...]
) -> None:
    job = start(box, node, nolock.slow_disk(shims["slowwrite"], node, 2000))
    copying(node)
    seeder = child_of(job.pid)
    victim = job.pid if target == "the entrypoint" else seeder
    for sig in signals:  # TERM first, as timeout(1) and Kubernetes do; KILL a second later, if need be
        if alive(victim):
            os.kill(victim, sig)
            time.sleep(1)
    job.communicate(timeout=10)
    deadline = time.monotonic() + 5
    while alive(seeder) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(job.pid) and not alive(seeder), "a process of the start is left running"
    assert job.returncode != 0  # the job never started
    assert not (node / NAME).exists()

    started = time.monotonic()
    again = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=node)
    took = time.monotonic() - started

    served_from(again, node)
    assert took < 30 + 10, f"served after {took:.1f} s"
    if signals[0] == signal.SIGTERM or target == "the entrypoint":
        no_partial(node)  # TERM (its own, or as its parent's death signal): it removed its partial itself


# --- locks that do not exclude ------------------------------------------------------------------------

NAMESPACE = r"""
mount --bind "$1" "$2" || exit 99
shift 2
for out in "$@"; do
    (
        read -r _ <"$GATE"
        $SH "$SCRIPT" env >"$out.out" 2>"$out.err"
        echo $? >"$out.status" && mv "$out.status" "$out.rc"
    ) &
done
wait
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("round_", range(10))
def test_eight_jobs_in_two_namespaces_whose_locks_do_not_exclude_all_serve_node_storage(
    box: Box, node: Path, shims: dict[str, Path], tmp_path: Path, round_: int
) -> None:
    """Two mount namespaces stand for two nodes mounting the volume (each at a place of its own); in
    each, four jobs start at once, and flock succeeds for every one of them: all copy, none waits (a
    slow disk keeps the copies in progress together, on a machine however busy)."""
    unshare = require("unshare")
    volume = node.parents[1]
    gate = tmp_path / "gate"  # the gate and the jobs' output outside the box: only the volume is slow
    os.mkfifo(gate)
    shimmed = preload(
        nolock.not_excluding(shims["nolock"], box.root), nolock.slow_disk(shims["slowwrite"], box.root, 1000)
    )
    env = box.env(BAKE_REQUIRE=1, GATE=gate, SH=" ".join(box.shell.argv), SCRIPT=box.argv()[-1], **shimmed)
    runs = []
    for side in ("a", "b"):
        mount_at = box.root / f"node-{side}"
        mount_at.mkdir()
        outs = [str(tmp_path / f"job-{side}{i}") for i in range(4)]
        env_side = {**env, "TIKTOKEN_RS_CACHE_DIR": str(mount_at / "hf" / "tiktoken-rs-cache")}
        runs.append((mount_at, outs))
        argv = [unshare, "-m", "--propagation", "private", "/bin/sh", "-c", NAMESPACE, "ns", volume, mount_at]
        subprocess.Popen(
            [*map(str, argv), *outs], env={**env_side, "PATH": f"{box.bin}:/usr/bin:/bin"}, cwd=box.root
        )
    time.sleep(1)
    with gate.open("w") as go:
        go.write("\n" * 8)

    deadline = time.monotonic() + 240
    copiers = 0
    for mount_at, outs in runs:
        for out in outs:
            while not Path(f"{out}.rc").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            rc = int(Path(f"{out}.rc").read_text() or "-1")
            result = (rc, Path(f"{out}.out").read_text(), Path(f"{out}.err").read_text())
            served_from(result, node, mount_at / "hf" / "tiktoken-rs-cache")
            copiers += "copied 1 file(s)" in result[2]
    assert copiers >= 2, "the locks excluded: the shim is not in force"  # each "held" the lock, and copied
    assert hashlib.sha256((node / NAME).read_bytes()).hexdigest() == SHA
    assert (node / NAME).stat().st_nlink == 1 and not (node / NAME).is_symlink()
    no_partial(node)
    assert sorted(p.name for p in node.iterdir()) == [".bake", NAME]


# --- clocks -------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_a_waiters_wall_clock_stepping_60_s_never_takes_over_a_live_copier(
    box: Box, node: Path, shims: dict[str, Path]
) -> None:
    no_locks = nolock.environment(shims["nolock"], node)  # the claim and the watch, as on NFS without lockd
    copier = start(box, node, preload(no_locks, nolock.slow_disk(shims["slowwrite"], node, 3000)))
    copying(node)
    stepping = preload(no_locks, nolock.stepping_clock(shims["clockstep"], 60))
    waiter = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=node, **stepping)
    out, err = copier.communicate(timeout=60)

    served_from(waiter, node)
    assert re.search(r"waited \d+ s for another copier's copy", waiter.stderr), waiter.stderr
    assert "took over" not in waiter.stderr and "removed a dead copier" not in waiter.stderr
    served_from((copier.returncode, out, err), node)
    assert "copied 1 file(s)" in err and "took over" not in err
    no_partial(node)


# --- a stopped copier ---------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_a_stopped_copiers_waiter_is_served_within_the_bound_and_the_copier_ends_quietly(
    box: Box, node: Path, shims: dict[str, Path]
) -> None:
    copier = start(box, node, nolock.slow_disk(shims["slowwrite"], node, 500))
    copying(node)
    seeder = child_of(copier.pid)
    os.kill(seeder, signal.SIGSTOP)
    try:
        started = time.monotonic()
        waiter = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=node)
        took = time.monotonic() - started
    finally:
        os.kill(seeder, signal.SIGCONT)
    out, err = copier.communicate(timeout=60)

    served_from(waiter, node)
    # The bound for 24 MiB: 30 s without progress, plus 10 s, plus 1 s per 32 MiB.
    assert 30 <= took < 41, f"served after {took:.1f} s"
    assert re.search(r"took over the copy into .* after 3\d s without progress", waiter.stderr), waiter.stderr
    served_from((copier.returncode, out, err), node)  # quietly: exit 0, no warning, from node storage
    assert re.search(r"another copier took over after \d+ s without progress", err), err
    no_partial(node)


# --- a full volume ---------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_volume_too_small_for_the_copy_is_left_as_is_and_the_job_served_job_local(box: Box) -> None:
    volume = nolock.ext4_volume(box.root, 12 * 1024 * 1024, "small")  # room for less than the 24 MiB file
    try:
        node = volume / "hf" / "tiktoken-rs-cache"
        node.mkdir(parents=True)
        (node / "fleet-vocab").write_bytes(b"another job's vocab")

        result = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=node)

        served = Path(job_env(result)["TIKTOKEN_RS_CACHE_DIR"])
        assert served.parent == box.tmp, result.stderr  # re-pointed, for this job only
        assert hashlib.sha256((served / NAME).read_bytes()).hexdigest() == SHA
        assert (served / "fleet-vocab").read_bytes() == b"another job's vocab"  # the node's own, in view
        assert "left as is: node storage that cannot be written (the copy: no space left on the device" in (
            result.stderr
        )
        assert not (node / NAME).exists()
        no_partial(node)
    finally:
        subprocess.run(["umount", "-l", str(volume)], capture_output=True, check=False)


def test_the_shims_are_loaded_where_the_cases_need_them(box: Box, shims: dict[str, Path]) -> None:
    if box.shell.tool is None:
        return
    # busybox's applets are dynamically linked on Debian: the clock shim reaches them as it does Python.
    done = subprocess.run(
        [box.shell.argv[0], "date", "+%s"], env=nolock.stepping_clock(shims["clockstep"], 60),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        fail_or_skip(f"busybox date failed under the clock shim: {done.stderr}")
    assert abs(int(done.stdout) - time.time()) >= 59

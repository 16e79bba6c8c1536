"""bake seed (bake/seed/), the part of job start that writes node storage: one module at a time, then the
command's result line and exit codes. The entrypoint's runs of it, racing, killed and on hostile
volumes, are in the entrypoint's own tests (tests/test_entrypoint.py, and the reliability suite).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake import index
from bake.seed import checks, command, copier, liveness, nodefs, plan, right, seeder, view
from tests.runners import REPO, cli_env
from tests.serve import content, require, sealed

VOCAB = "fb374d419588a4632f3f557e76b4b70aebbca790"
FILES = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": content("v3", 3000),
    f"tiktoken/{VOCAB}": content("o200k", 1500),
    "nltk/corpora/tiny/words.txt": content("words", 900),
    "nltk/tokenizers/punkt.zip": content("punkt", 700),
}
URLS = {f"tiktoken/{VOCAB}": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"}
DECLARED = {"nltk": "$NLTK_DATA"}


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    return sealed(FILES, URLS, DECLARED)(tmp_path / "assets")


def request(assets: Path, location: Path, consumer: str = "nltk", **flags: bool) -> seeder.Request:
    return seeder.Request(location, plan.load(assets, consumer), assets, **flags)


def nltk_files(location: Path) -> dict[str, bytes]:
    return {
        name: (location / name).read_bytes()
        for name in ("corpora/tiny/words.txt", "tokenizers/punkt.zip")
        if (location / name).is_file()
    }


# --- the stamp, byte for byte what the entrypoint's stat prints ----------------------------------


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Berlin"])
@pytest.mark.parametrize("stat_tool", ["stat", "busybox"])
def test_a_stamp_line_is_what_gnu_and_busybox_stat_print(tmp_path: Path, zone: str, stat_tool: str) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    argv = [require("stat")] if stat_tool == "stat" else [require("busybox"), "stat"]
    printed = subprocess.run(
        [*argv, "-c", "%i %y %z", str(directory)],
        env={"TZ": zone},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = subprocess.run(
        [sys.executable, "-c", "import os, sys; from bake.seed import stamp; "
         "print(stamp.stat_line(os.stat(sys.argv[1])))",
         str(directory)],
        env=cli_env({"TZ": zone}), capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert ours == printed


# --- node storage, never through a link ------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", ["link", "FIFO", "socket", "device"])
def test_open_regular_names_what_is_there_and_opens_nothing_else(tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"do not touch")
    name = tmp_path / "lock"
    if planted == "link":
        name.symlink_to(victim)
    elif planted == "FIFO":
        os.mkfifo(name)  # opened, it would block this test forever
    elif planted == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(name))
    else:
        os.mknod(name, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(nodefs.Planted) as caught:
            nodefs.open_regular(fd, "lock", f"{tmp_path}/lock", os.O_RDWR)
    finally:
        os.close(fd)
    kind = {"link": "a symbolic link", "FIFO": "a FIFO", "socket": "a socket", "device": "a device"}[planted]
    assert str(caught.value) == f"{tmp_path}/lock is {kind}"
    assert victim.read_bytes() == b"do not touch"


def test_directories_are_walked_and_made_without_following_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "loc").mkdir()
    (tmp_path / "loc" / ".bake").symlink_to(tmp_path / "elsewhere")
    fd = os.open(tmp_path / "loc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        planted = pytest.raises(nodefs.Planted, match=r"loc/\.bake is a symbolic link")
        with planted, nodefs.walked(fd, [".bake", "more"], f"{tmp_path}/loc", make=True):
            pass
    finally:
        os.close(fd)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_remove_tree_removes_a_link_itself_and_never_what_it_points_to(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept").write_bytes(b"kept")
    state = tmp_path / "state"
    (state / "partial.x").mkdir(parents=True)
    (state / "partial.x" / "0").write_bytes(b"half")
    (state / "partial.x" / "inner").symlink_to(victim)
    (state / "partial.y").symlink_to(victim)
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        nodefs.remove_tree(fd, "partial.x")
        nodefs.remove_tree(fd, "partial.y")
        nodefs.remove_tree(fd, "gone already")
    finally:
        os.close(fd)
    assert list(state.iterdir()) == [] and (victim / "kept").read_bytes() == b"kept"


# --- liveness: progress on the judge's own monotonic clock --------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(liveness.time, "monotonic", fake)
    return fake


def partial_with_beat(state: Path, name: str, beat: bytes) -> Path:
    (state / name).mkdir(parents=True, exist_ok=True)
    (state / name / "beat").write_bytes(beat)
    return state / name


def test_a_partial_that_beats_is_never_stale_and_a_still_one_is_after_the_bound(
    tmp_path: Path, clock: FakeClock
) -> None:
    state = tmp_path / ".bake"
    live = partial_with_beat(state, "partial.a.1.live", b"1 0\n")
    partial_with_beat(state, "partial.b.2.dead", b"7 100\n")
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        watch = liveness.Watch(fd, str(state))
        for beat in range(1, 200):  # a poll every 0.2 s: 40 s in all
            clock.now += 0.2
            (live / "beat").write_bytes(b"%d 0\n" % (beat + 1))
            watch.poll()
            if clock.now - 1000 < liveness.STALE_S - 0.2:
                assert watch.stale() == [], clock.now
        assert watch.stale() == ["partial.b.2.dead"]
        assert watch.quiet == 0.0  # the live one made progress all along
        assert watch.reclaim("partial.b.2.dead") and not watch.reclaim("partial.b.2.dead")
    finally:
        os.close(fd)
    assert sorted(p.name for p in state.iterdir()) == ["partial.a.1.live"]


def test_time_the_judge_did_not_run_counts_for_nothing(tmp_path: Path, clock: FakeClock) -> None:
    # The judge stopped (SIGSTOP, a hung NFS call) for 100 s: one poll's step at most, not 100 s.
    state = tmp_path / ".bake"
    partial_with_beat(state, "partial.a.1.x", b"1 0\n")
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        watch = liveness.Watch(fd, str(state))
        watch.poll()
        clock.now += 100
        watch.poll()
        assert watch.stale() == [] and watch.quiet == liveness.MAX_STEP_S
    finally:
        os.close(fd)


def test_a_copiers_beat_is_a_thread_of_its_own_process_and_sees_a_take_over(tmp_path: Path) -> None:
    state = tmp_path / ".bake"
    state.mkdir()
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        partial = liveness.Partial(fd, str(state))
        with liveness.Beat(partial) as beat:
            first = (state / partial.name / "beat").read_bytes()
            time.sleep(liveness.BEAT_S * 1.5)
            assert (state / partial.name / "beat").read_bytes() != first
            os.rename(state / partial.name, state / "stale.judge")  # a judge took it
            assert beat.taken_over.wait(liveness.BEAT_S * 3)
        partial.remove()  # no longer its own: left to the judge that took it
    finally:
        os.close(fd)
    assert (state / "stale.judge" / "beat").exists()


# --- the right to copy ------------------------------------------------------------------------------


def test_the_lock_excludes_and_a_failing_lock_call_makes_the_claim_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / ".bake"
    state.mkdir()
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first, second = right.Right(fd, str(state)), right.Right(fd, str(state))
        assert first.take() and not second.take()
        first.release()
        assert second.take()
        second.release()

        def no_locks(fd: int, mode: int) -> bool:
            raise OSError(errno.ENOLCK, "No locks available")

        monkeypatch.setattr(right, "try_flock", no_locks)
        first, second = right.Right(fd, str(state)), right.Right(fd, str(state))
        assert first.take() and not second.take()
        assert (
            first.note
            == f"flock on {state}/lock failed: No locks available, so an exclusive mkdir of copying stands "
            "in for the lock"
        )
        seen = (state / "copying").stat().st_ino
        assert not second.take_over(seen + 1)  # a claim the judge did not see stand still: progress
        assert second.take_over(seen) and (state / "copying").is_dir()
        first.release()  # its claim was taken: it removes nothing of the new one's...
        second.release()
    finally:
        os.close(fd)
    assert sorted(p.name for p in state.iterdir()) == ["lock"]


# --- the seeder ------------------------------------------------------------------------------------


def test_a_first_seeding_copies_verified_files_stamps_and_a_second_finds_them(
    assets: Path, tmp_path: Path
) -> None:
    loc = tmp_path / "node"
    loc.mkdir()
    (loc / "theirs.bin").write_bytes(b"node data")

    outcome = seeder.seed(request(assets, loc))

    assert outcome == seeder.Outcome(seeder.SERVED, f"copied 2 file(s), 1600 bytes, into {loc}")
    assert nltk_files(loc) == {n.split("/", 1)[1]: d for n, d in FILES.items() if n.startswith("nltk/")}
    assert all((loc / n).stat().st_nlink == 1 for n in ("corpora/tiny/words.txt", "tokenizers/punkt.zip"))
    assert sorted(p.name for p in (loc / ".bake").iterdir()) == [
        "lock", f"served.{plan.load(assets, 'nltk').set.digest}.copied",
    ]  # fmt: skip
    assert seeder.seed(request(assets, loc)) == seeder.Outcome(seeder.SERVED, "")


def test_a_name_holding_something_else_is_never_changed_and_the_rest_is_copied(
    assets: Path, tmp_path: Path
) -> None:
    loc = tmp_path / "node"
    (loc / "corpora" / "tiny").mkdir(parents=True)
    (loc / "corpora" / "tiny" / "words.txt").write_bytes(b"truncated")

    outcome = seeder.seed(request(assets, loc))

    assert outcome.kind == seeder.MOVED and outcome.code == 6 and not outcome.planted
    assert (
        outcome.text
        == "node storage where corpora/tiny/words.txt is 9 bytes, not the baked 900, and nothing there is "
        "changed"
    )
    assert (loc / "corpora" / "tiny" / "words.txt").read_bytes() == b"truncated"
    assert (loc / "tokenizers" / "punkt.zip").read_bytes() == FILES["nltk/tokenizers/punkt.zip"]


def test_a_link_planted_at_bakes_state_is_named_and_never_followed(assets: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    loc = tmp_path / "node"
    loc.mkdir()
    (loc / ".bake").symlink_to(victim)

    outcome = seeder.seed(request(assets, loc))

    assert (outcome.kind, outcome.code, outcome.planted) == (seeder.MOVED, 6, True)
    assert (
        outcome.text
        == f"node storage where {loc}/.bake is a symbolic link, which is never followed or opened"
    )
    assert list(victim.iterdir()) == []


def test_a_copy_that_does_not_hash_as_baked_is_never_installed(assets: Path, tmp_path: Path) -> None:
    tampered = assets / "nltk" / "tokenizers" / "punkt.zip"
    tampered.parent.chmod(0o755)
    tampered.chmod(0o644)
    tampered.write_bytes(bytes(700))
    loc = tmp_path / "node"
    loc.mkdir()

    outcome = seeder.seed(request(assets, loc))

    assert (outcome.kind, outcome.code) == (seeder.LEFT, 3)
    good = hashlib.sha256(FILES["nltk/tokenizers/punkt.zip"]).hexdigest()
    assert (
        f"a copy of tokenizers/punkt.zip hashed sha256 {hashlib.sha256(bytes(700)).hexdigest()}"
        in outcome.text
    )
    assert f"expected {good}" in outcome.text
    assert nltk_files(loc) == {} and not list((loc / ".bake").glob("partial.*"))


def test_a_file_missing_from_the_image_is_named(assets: Path, tmp_path: Path) -> None:
    gone = assets / "nltk" / "tokenizers" / "punkt.zip"
    gone.parent.chmod(0o755)
    gone.unlink()
    loc = tmp_path / "node"
    loc.mkdir()

    outcome = seeder.seed(request(assets, loc))

    assert (outcome.kind, outcome.code) == (seeder.LEFT, 6)
    assert outcome.text == f"the image lacks {gone}, which bake.serve names: rebuild the image"


def test_without_copying_node_storage_is_left_as_is(assets: Path, tmp_path: Path) -> None:
    loc = tmp_path / "node"
    loc.mkdir()

    outcome = seeder.seed(request(assets, loc, copy=False))

    assert outcome == seeder.Outcome(
        seeder.LEFT, "node storage, left as is under BAKE_SEED=0 (corpora/tiny/words.txt: nothing there)", 6
    )
    assert list(loc.iterdir()) == []


def test_a_name_filled_during_the_copy_is_proved_by_its_hash(
    assets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another copier (its lock did not exclude) installs a file while this one copies: this one's
    # link finds the name taken, hashes what is there, and counts it served; an impostor, not.
    loc = tmp_path / "node"
    loc.mkdir()
    real = copier._copy_one

    def beside(source, record, partial, name, beat):
        target = loc / record.name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = FILES[f"nltk/{record.name}"]
        target.write_bytes(data if record.name.startswith("corpora") else bytes(len(data)))
        return real(source, record, partial, name, beat)

    monkeypatch.setattr(copier, "_copy_one", beside)
    outcome = seeder.seed(request(assets, loc))

    assert outcome.kind == seeder.MOVED
    assert outcome.text.startswith(
        "node storage where tokenizers/punkt.zip is a same-size file that hashes sha256"
    )
    assert (loc / "corpora" / "tiny" / "words.txt").read_bytes() == FILES["nltk/corpora/tiny/words.txt"]
    assert not list((loc / ".bake").glob("partial.*"))


def test_the_bound_is_the_stale_bound_a_margin_and_the_bytes_left_at_the_floor_rate() -> None:
    assert seeder.bound(0) == liveness.STALE_S + seeder.MARGIN_S == 40
    assert seeder.bound(32 * 1024 * 1024 * 30) == 70


# --- BAKE_VERIFY's hashing, and SHA256SUMS's one reader -----------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a" * 64 + "  x\r\n", "line 1 ends with a carriage return (CRLF line endings): expected LF line "
         "endings, as bake writes them"),
        ("a" * 64 + "  x\n" + "b" * 63 + "  y\n",
         "line 2 is not '<sha256>  <path>': expected the format bake writes"),
        ("a" * 64 + "  ../x\n", "line 1 names '../x', outside DEST: expected a relative path inside it"),
        ("a" * 64 + "  /etc/passwd\n",
         "line 1 names '/etc/passwd', outside DEST: expected a relative path inside it"),
        ("", "holds no checksum line: expected one per baked file"),
    ],
)  # fmt: skip
def test_read_sums_names_the_first_line_sha256sum_could_not_check(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "SHA256SUMS").write_text(text, newline="")
    with pytest.raises(ValueError) as caught:
        index.read_sums(tmp_path)
    assert str(caught.value) == problem.replace("DEST", str(tmp_path))


def test_asset_problems_name_each_file_that_does_not_hash_as_baked(assets: Path) -> None:
    assert checks.asset_problems(assets) == []
    tampered = assets / "nltk" / "tokenizers" / "punkt.zip"
    tampered.parent.chmod(0o755)
    tampered.chmod(0o644)
    tampered.write_bytes(bytes(700))
    good = hashlib.sha256(FILES["nltk/tokenizers/punkt.zip"]).hexdigest()

    assert checks.asset_problems(assets) == [
        f"BAKE_VERIFY=1: {tampered}: expected sha256 {good} (SHA256SUMS), saw sha256 "
        f"{hashlib.sha256(bytes(700)).hexdigest()}; the image's asset layer is damaged: pull the image again "
        "or rebuild it; job not started"
    ]


# --- the job-local view of a re-pointed variable's directory ---------------------------------------


def test_a_view_links_every_finished_entry_and_makes_the_path_to_sub_real(tmp_path: Path) -> None:
    base = tmp_path / "hf home"
    (base / "hub" / "models--other").mkdir(parents=True)
    (base / "token").write_bytes(b"t")
    (base / ".hidden").write_bytes(b"h")
    (base / "x.lock").write_bytes(b"")
    (base / "a link").symlink_to(tmp_path)
    (base / "s3tokenizer").mkdir()

    made = view.make(tmp_path / "tmp", "XDG_CACHE_HOME", base, "s3tokenizer", set())

    assert made.parent == tmp_path / "tmp" and made.name.startswith("bake-XDG_CACHE_HOME.")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert sorted(p.name for p in made.iterdir()) == [".hidden", "hub", "s3tokenizer", "token"]
    assert (made / "hub").is_symlink() and (made / "hub").samefile(base / "hub")
    assert (made / "s3tokenizer").is_dir() and not (made / "s3tokenizer").is_symlink()
    assert list((made / "s3tokenizer").iterdir()) == []
    served_there = view.make(tmp_path / "tmp", "TIKTOKEN_CACHE_DIR", base, "", {"hub", ".bake"})
    assert sorted(p.name for p in served_there.iterdir()) == [".hidden", "s3tokenizer", "token"]


# --- the command: its line and its exit codes ----------------------------------------------------


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


def test_bake_lists_seed_with_its_exit_codes() -> None:
    from bake.cli import EXIT_CODES, main

    assert EXIT_CODES["seed"] == (0, 2, 3, 6)
    with pytest.raises(SystemExit) as done:
        main(["seed", "--help"])
    assert done.value.code == 0


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


@pytest.fixture
def cleanup() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def test_the_entrypoints_path_loads_no_more_than_the_seeder(tmp_path: Path) -> None:
    # `python -m bake seed` is what bake-entrypoint runs at job start: the rest of the CLI (110 ms of
    # imports: the fetch engine, the manifest, the index) stays unloaded. (Its --help is the CLI's.)
    probe = (
        f"import runpy, sys\nsys.argv = ['bake', 'seed', '--assets', {str(tmp_path)!r}]\n"
        "try:\n    runpy.run_module('bake', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('bake')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=cli_env(), capture_output=True, text=True, check=True
    )
    loaded = eval(done.stdout.strip().splitlines()[-1])
    assert "bake.cli" not in loaded and "bake.fetch" not in loaded and "bake.manifest" not in loaded
    assert command.__name__ in loaded

"""The entrypoint where vLLM's jobs really run, on the host under dash and busybox sh: node storage
whose locks fail (NFS without lockd, simulated at the lock calls only by tests/nolock), directories a
runner makes only after bake's line, and a re-pointed variable that keeps what it named in view.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests import nolock
from tests import test_entrypoint as rows
from tests.serve import (
    SHELLS,
    AssetMaker,
    Box,
    content,
    job_env,
    new_box,
    ready_lines,
    resolved,
    sealed,
    snapshot,
)
from tests.test_entrypoint import (
    ASSET_FILES,
    HUB_BLOBS,
    HUB_COMMIT,
    HUB_REPO,
    LOCATIONS,
    TK_RS,
    UNDERS,
    Location,
    assert_copies,
    assert_made,
    consumer_dir,
    fill_data,
    hf_offline,
    names,
    needs_root,
    other_repo,
    point_at,
    seeded_only,
)

# The same boxes as the contract's rows: the test asset root (and a Hub repository's), under dash
# and busybox sh.
shell, box, hub_box = rows.shell, rows.box, rows.hub_box

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nolock.build(tmp_path_factory.mktemp("nolock"))


# --- node storage whose locks fail -----------------------------------------------


@pytest.mark.parametrize("loc", LOCATIONS, ids=str)
def test_without_locks_node_storage_is_seeded_and_nothing_is_re_pointed(
    box: Box, shim: Path, loc: Location
) -> None:
    volume = box.root / "volume"
    data = volume / (loc.sub or "data")
    fill_data(data, loc, stale=False)
    before = snapshot(data)

    result = box.run("env", BAKE_REQUIRE=1, **point_at(loc, data), **nolock.environment(shim, volume))

    assert result.returncode == 0, result.stderr
    env = job_env(result)
    assert consumer_dir(loc, env, box.root) == data  # the runner's variable, as it set it
    assert seeded_only(before, snapshot(data), "", loc) == set(names(loc))
    assert_copies(data, loc)
    assert not (data / ".bake" / "copying").exists()
    ready = ready_lines(result.stderr)[0]
    assert f"flock on {data}/.bake/lock failed: No locks available" in ready
    assert "exclusive mkdir of copying stands in for the lock" in ready
    assert "job-local" not in result.stderr and "warning" not in result.stderr


def test_without_flock_or_awk_on_path_node_storage_is_seeded_the_same_way(box: Box) -> None:
    # bake seed takes the lock itself (flock(2)): the entrypoint needs neither tool.
    for tool in ("flock", "awk", "sha256sum", "find", "xargs"):
        (box.bin / tool).unlink()
    data = box.root / "volume" / "data"
    fill_data(data, TK_RS, stale=False)
    before = snapshot(data)

    result = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=data)

    assert result.returncode == 0, result.stderr
    assert Path(job_env(result)["TIKTOKEN_RS_CACHE_DIR"]) == data
    assert seeded_only(before, snapshot(data), "", TK_RS) == set(names(TK_RS))
    assert f"copied 2 file(s), 2700 bytes, into {data}" in ready_lines(result.stderr)[0]


@pytest.mark.parametrize("loc", LOCATIONS, ids=str)
def test_without_bake_node_storage_is_left_as_is_and_served_job_local_with_a_warning(
    box: Box, loc: Location
) -> None:
    (box.bin / "bake").unlink()
    data = box.root / "volume" / (loc.sub or "data")
    fill_data(data, loc, stale=False)
    before = snapshot(data)

    result = box.run("env", **point_at(loc, data))

    env = job_env(result)
    assert snapshot(data) == before
    assert "no bake next to bake-entrypoint or on PATH" in result.stderr
    if loc.sub:  # left as is, with a warning: re-pointing its variable would hide the rest of it
        assert f"bake: warning: {data}: expected a directory serving" in result.stderr
    else:  # re-pointed to a job-local directory, and a warning: the node's own entries are not in it
        served = consumer_dir(loc, env, box.root)
        assert served.parent == box.tmp
        assert_made(served, box.assets, loc)
        assert f"bake: warning: {data}: its other entries are not in view" in result.stderr


def _copier(box: Box, data: Path, slow: Path, nolocks: Path) -> subprocess.Popen:
    """Another job copying into ``data`` (the real entrypoint, TIKTOKEN_RS_CACHE_DIR there) on a slow
    disk whose locks fail: each write of its copy takes a second; it has begun once its partial
    holds a byte."""
    env = {**nolock.slow_disk(slow, data, 1000), **nolock.environment(nolocks, data)}
    env["LD_PRELOAD"] = f"{slow} {nolocks}"
    copier = subprocess.Popen(
        box.argv("true"), env=box.env(TIKTOKEN_RS_CACHE_DIR=data, **env),
        cwd=box.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not [p for p in data.glob(".bake/partial.*/0")] and time.monotonic() < deadline:
        time.sleep(0.05)
    return copier


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nolock.build(tmp_path_factory.mktemp("slow"), nolock.HERE / "slowwrite.c")


def test_without_locks_a_job_waits_for_a_live_copier(box: Box, shim: Path, slow: Path) -> None:
    data = box.root / "volume" / "data"
    fill_data(data, TK_RS, stale=False)
    copier = _copier(box, data, slow, shim)
    try:
        started = time.monotonic()
        result = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=data, **nolock.environment(shim, data))
        took = time.monotonic() - started
    finally:
        _, err = copier.communicate(timeout=60)
    assert copier.returncode == 0, err
    assert result.returncode == 0, result.stderr
    assert Path(job_env(result)["TIKTOKEN_RS_CACHE_DIR"]) == data
    assert took >= 1, f"the job did not wait for the copy in progress ({took:.1f} s)"
    assert re.search(rf"waited \d+ s for another copier's copy into {re.escape(str(data))}", result.stderr)
    assert "copied" not in result.stderr and "copied 2 file(s)" in err
    assert_copies(data, TK_RS)


@pytest.mark.timeout(180)
def test_without_locks_a_dead_copiers_lock_and_partial_are_reclaimed(box: Box, shim: Path) -> None:
    data = box.root / "volume" / "data"
    fill_data(data, TK_RS, stale=False)
    # What a copier killed by SIGKILL leaves: its claim, and its partial with a beat that never moves.
    (data / ".bake" / "copying").mkdir(parents=True)
    partial = data / ".bake" / "partial.elsewhere.4242.0badc0de"
    partial.mkdir()
    (partial / "beat").write_bytes(b"17 1024\n")
    (partial / "0").write_bytes(b"a killed copier's partial")

    started = time.monotonic()
    result = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=data, **nolock.environment(shim, data))
    took = time.monotonic() - started

    assert result.returncode == 0, result.stderr
    assert Path(job_env(result)["TIKTOKEN_RS_CACHE_DIR"]) == data
    # The rule: no partial made progress for 30 s while this job watched, on its own monotonic clock.
    assert 30 <= took < 30 + 10 + 10, f"took over after {took:.1f} s"
    assert_copies(data, TK_RS)
    ready = ready_lines(result.stderr)[0]
    assert f"removed a dead copier's partial {data}/.bake/{partial.name} (30 s without progress)" in ready
    assert re.search(rf"took over the copy into {re.escape(str(data))} after 3\d s without progress", ready)
    assert sorted(p.name for p in (data / ".bake").iterdir()) == [
        "lock",
        f"served.{_digest(box, 'tiktoken')}.copied",
    ]


def _digest(box: Box, consumer: str) -> str:
    for line in (box.assets / "bake.serve").read_text().splitlines():
        fields = line.split("\t")
        if fields[0] == "set" and fields[1] == consumer:
            return fields[2]
    raise AssertionError(f"no set record for {consumer}")


def test_without_locks_a_link_planted_as_the_lock_directory_is_never_followed(box: Box, shim: Path) -> None:
    data = box.root / "volume" / "data"
    fill_data(data, TK_RS, stale=False)
    elsewhere = box.root / "elsewhere"
    elsewhere.mkdir()
    (data / ".bake").mkdir()
    (data / ".bake" / "copying").symlink_to(elsewhere)

    result = box.run("env", TIKTOKEN_RS_CACHE_DIR=data, **nolock.environment(shim, data))

    assert result.returncode == 0, result.stderr
    assert list(elsewhere.iterdir()) == []
    assert f"the lock {data}/.bake/copying is a symbolic link" in result.stderr
    assert Path(job_env(result)["TIKTOKEN_RS_CACHE_DIR"]).parent == box.tmp


# --- a re-pointed variable keeps what it named ---------------------------------


@pytest.mark.parametrize("loc", UNDERS, ids=str)
def test_a_re_pointed_variable_keeps_every_other_entry_in_view(box: Box, loc: Location) -> None:
    home = box.root / "persistent"  # what the runner's variable names: an HF_HOME, an XDG_CACHE_HOME
    data = home / loc.sub
    fill_data(data, loc)
    first = names(loc)[0]
    (data / first).write_bytes(b"truncated")  # a baked name holding something else: served job-local
    (home / "hub").mkdir()
    (home / "hub" / "models--org--model").mkdir()
    (home / ".hidden").write_bytes(b"a dot file")
    (home / "token").write_bytes(b"hf_token")

    result = box.run("env", BAKE_REQUIRE=1, **point_at(loc, data))

    assert result.returncode == 0, result.stderr
    view = Path(job_env(result)[loc.var])
    assert view.parent == box.tmp
    entries = {p.name for p in home.iterdir()}
    # Beside them, only what bake serves through the same variable: its consumers' SUBs.
    served_here = {other.sub for other in UNDERS if other.var == loc.var}
    assert entries <= {p.name for p in view.iterdir()} <= entries | served_here
    for name in entries - served_here:
        assert (view / name).is_symlink() and (view / name).samefile(home / name), name
    assert_made(view / loc.sub, box.assets, loc)
    assert (view / "hub" / "models--org--model").is_dir()


# --- directories a runner makes after bake's line ---------------------------------


def _modes(root: Path, top: Path) -> dict[str, tuple[int, int, int]]:
    """Mode, owner and group of ``top`` and each directory above it, up to ``root``."""
    out = {}
    path = top
    while path != root:
        st = path.lstat()
        out[str(path.relative_to(root))] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
        path = path.parent
    return out


def test_a_missing_tmpdir_is_made_as_the_runners_mkdir_p_makes_it(box: Box) -> None:
    tmpdir = box.root / "job" / "vllm-0123abcd" / "tmp"  # nothing of it exists yet
    control = box.root / "control" / "vllm-0123abcd" / "tmp"

    result = box.run(
        "env", BAKE_REQUIRE=1, TMPDIR=tmpdir, TIKTOKEN_RS_CACHE_DIR=None, TIKTOKEN_CACHE_DIR=None
    )
    subprocess.run(["sh", "-c", 'umask 022; mkdir -p "$0"', str(control)], check=True)

    assert result.returncode == 0, result.stderr
    env = job_env(result)
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"):
        assert Path(env[var]).parent == tmpdir
        assert_made(Path(env[var]), box.assets, TK_RS)
    assert _modes(box.root / "job", tmpdir) == _modes(box.root / "control", control)


def test_a_missing_parent_of_xdg_cache_home_is_made_as_the_runners_mkdir_p_makes_it(box: Box) -> None:
    xdg = box.root / "job" / "vllm-buildkite-0123abcd" / "cache" / "xdg"
    control = box.root / "control" / "vllm-buildkite-0123abcd" / "cache" / "xdg"

    result = box.run("env", BAKE_REQUIRE=1, XDG_CACHE_HOME=xdg)
    subprocess.run(["sh", "-c", 'umask 022; mkdir -p "$0/s3tokenizer"', str(control)], check=True)

    assert result.returncode == 0, result.stderr
    assert_made(xdg / "s3tokenizer", box.assets, LOCATIONS[0])
    assert _modes(box.root / "job", xdg / "s3tokenizer") == _modes(
        box.root / "control", control / "s3tokenizer"
    )
    assert set(ASSET_FILES) >= {f"s3tokenizer/{n}" for n in names(LOCATIONS[0])}


# --- bursts of twenty and a hundred jobs at once on a lock-less volume ---------------------------------

BIG = {"model/weights.bin": content("weights", 64 * 1024 * 1024), "model/config.json": b'{"layers": 2}\n'}
BURSTS = (20, 100)


@pytest.fixture(scope="module")
def big_assets() -> AssetMaker:
    return sealed(BIG, declared={"model": "${MODEL_HOME:-$HOME/.cache}/model"})


def _written_kib(volume: Path) -> int:
    """The ext4 filesystem's own count of KiB written to it since it was mounted."""
    device = os.path.basename(os.path.realpath(_source_of(volume)))
    return int(Path(f"/sys/fs/ext4/{device}/lifetime_write_kbytes").read_text())


def _source_of(mountpoint: Path) -> str:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, target, *_ = line.split(" ")
        if target == str(mountpoint):
            return source
    raise AssertionError(f"{mountpoint} is not mounted")


@needs_root
@pytest.mark.timeout(300)
@pytest.mark.parametrize("jobs", BURSTS)
def test_a_burst_of_jobs_at_once_on_a_lockless_volume_copy_once_and_all_serve_it(
    big_assets: AssetMaker, shim: Path, slow: Path, jobs: int
) -> None:
    dash = resolved(SHELLS[0])
    made = new_box(dash, big_assets)
    volume = nolock.ext4_volume(made.root, 512 * 1024 * 1024)
    try:
        home = volume / "models"  # a persistent MODEL_HOME that earlier jobs filled
        (home / "other").mkdir(parents=True)
        (home / "other" / "kept.bin").write_bytes(b"an earlier job's model")
        before = _written_kib(volume)
        # On a slow disk (each write 250 ms), so that the copy is still in progress when the other jobs
        # look, however quiet the machine: on an idle one the copy could end before any of them started.
        disk = nolock.slow_disk(slow, volume, 250)
        env = made.env(
            MODEL_HOME=home,
            BAKE_REQUIRE=1,
            **{**disk, **nolock.environment(shim, volume), "LD_PRELOAD": f"{shim} {slow}"},
        )
        # Released together: each job blocks on its stdin until every one of them has started.
        started = [
            subprocess.Popen(
                ["sh", "-c", 'read -r _; exec "$@"', "job", *made.argv("env")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=made.root,
                text=True,
            )
            for _ in range(jobs)
        ]
        for job in started:
            assert job.stdin is not None
            job.stdin.write("go\n")
            job.stdin.flush()
        results = [(job.wait(timeout=240), *job.communicate()) for job in started]
        written = _written_kib(volume) - before

        for code, out, err in results:
            assert code == 0, err
            assert f"MODEL_HOME={home}\n" in out  # nothing re-pointed
            assert "job-local" not in err and "warning" not in err
        copiers = [err for _, _, err in results if "copied 2 file(s)" in err]
        assert len(copiers) == 1, f"{len(copiers)} jobs copied"
        assert "No locks available, so an exclusive mkdir" in copiers[0]
        assert sum("for another copier's copy" in err for _, _, err in results) >= 1
        for name, data in BIG.items():
            served = home / name
            assert not served.is_symlink() and served.read_bytes() == data
        for path in volume.rglob("*"):  # no partial left, no link, nothing corrupt
            assert not path.is_symlink(), path
            assert "partial" not in path.name and path.name not in ("copying", "stale"), path
        assert (home / "other" / "kept.bin").read_bytes() == b"an earlier job's model"
        # One copy's bytes reached the volume, not twenty: 64 MiB, plus metadata and journal.
        assert written < 2 * 64 * 1024, f"{written} KiB written"
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False, capture_output=True)
        shutil.rmtree(made.root, ignore_errors=True)


def test_without_locks_a_shared_hub_cache_is_seeded_and_keeps_its_models(hub_box: Box, shim: Path) -> None:
    hf_home = hub_box.root / "hf home"
    other_repo(hf_home)

    result = hub_box.run("env", BAKE_REQUIRE=1, HF_HOME=hf_home, **nolock.environment(shim, hf_home))

    job = job_env(result)
    assert job["HF_HOME"] == str(hf_home) and "HF_HUB_CACHE" not in job  # nothing re-pointed
    out = hf_offline(hub_box, job)  # huggingface_hub itself, on the lock-less cache
    assert out[0] == str(hf_home / "hub" / HUB_REPO / "snapshots" / HUB_COMMIT)
    assert out[-1] == "['org/tiny', 'other/model']"  # the baked repository and what the node held
    assert not (hf_home / "hub" / ".locks" / ".bake" / "copying").exists()
    assert "No locks available, so an exclusive mkdir of copying stands in" in ready_lines(result.stderr)[0]


# --- the served stamp records what it proved (reliability round 4, finding 1) ---------


def _served_on_ext4(box: Box) -> Path:
    """A vocab location on its own ext4 filesystem (node storage), served once: copies and a stamp."""
    data = rows.mount(box, "ext4") / "cache" / "tiktoken-rs"
    fill_data(data, TK_RS, stale=False)
    first = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=data)
    assert first.returncode == 0, first.stderr
    assert_copies(data, TK_RS)
    assert list((data / ".bake").glob("served.*.copied"))
    return data


@needs_root
def test_a_stamp_from_the_future_proves_nothing(box: Box) -> None:
    data = _served_on_ext4(box)
    future = time.time() + 86400  # the clock stepped back a day after the stamp was written
    for stamp in (data / ".bake").glob("served.*"):
        os.utime(stamp, (future, future))
    removed = names(TK_RS)[0]
    (data / removed).unlink()

    again = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=data)

    assert again.returncode == 0, again.stderr
    assert_copies(data, TK_RS)  # proved missing, and copied again: never claimed served
    assert "copied 1 file(s)" in again.stderr


@needs_root
def test_a_cache_copied_with_its_times_kept_is_proved_again(box: Box) -> None:
    data = _served_on_ext4(box)
    copy = data.parent / "copied"
    subprocess.run(["cp", "-a", str(data), str(copy)], check=True)
    removed = names(TK_RS)[0]
    (copy / removed).unlink()
    os.utime(copy, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns))  # as rsync -a leaves it

    again = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=copy)

    assert again.returncode == 0, again.stderr
    assert_copies(copy, TK_RS)
    assert "copied 1 file(s)" in again.stderr


@needs_root
def test_the_second_start_is_proved_by_the_stamp_alone(box: Box) -> None:
    data = _served_on_ext4(box)
    (box.bin / "awk").unlink()  # a start that had to prove file by file would need awk

    second = box.run("env", BAKE_REQUIRE=1, TIKTOKEN_RS_CACHE_DIR=data)

    assert second.returncode == 0, second.stderr
    assert Path(job_env(second)["TIKTOKEN_RS_CACHE_DIR"]) == data
    assert "no awk" not in second.stderr and "warning" not in second.stderr


# --- BAKE_VERIFY=1 hashes the linked view too (finding 8) -------------------------


@pytest.mark.parametrize("impostor", ["a same-size file", "a link to a same-size file elsewhere"])
def test_under_bake_verify_the_linked_view_never_serves_the_wrong_bytes(box: Box, impostor: str) -> None:
    data = box.root / "cache dir" / "tiktoken-rs"
    data.mkdir(parents=True)
    real, wrong = names(TK_RS)[:2]
    (data / real).symlink_to(box.assets / TK_RS.prefix / real)  # one real link: the linked view
    same_size = bytes(len(ASSET_FILES[f"{TK_RS.prefix}/{wrong}"]))
    if impostor == "a same-size file":
        (data / wrong).write_bytes(same_size)
    else:
        (box.root / "elsewhere").write_bytes(same_size)
        (data / wrong).symlink_to(box.root / "elsewhere")

    result = box.run("env", BAKE_VERIFY=1, TIKTOKEN_RS_CACHE_DIR=data)

    assert result.returncode == 3, result.stderr
    assert f"BAKE_VERIFY=1: {data}/{wrong}: expected the baked file's sha256" in result.stderr
    assert result.stderr.count("error:") == 1


def test_a_re_pointed_hub_cache_keeps_the_nodes_other_repositories_in_view(hub_box: Box) -> None:
    hf_home = hub_box.root / "hf home"
    other_repo(hf_home)
    elsewhere = hub_box.root / "elsewhere"
    elsewhere.mkdir()
    planted = hf_home / "hub" / HUB_REPO / "blobs"
    planted.parent.mkdir(parents=True)
    planted.symlink_to(elsewhere)  # something in the way: the Hub is served job-local

    result = hub_box.run("env", BAKE_REQUIRE=1, HF_HOME=hf_home)

    job = job_env(result)
    view = Path(job["HF_HUB_CACHE"])
    assert view.parent == hub_box.tmp
    assert (view / "models--other--model").is_symlink()
    assert (view / "models--other--model").samefile(hf_home / "hub" / "models--other--model")
    assert not (view / HUB_REPO).is_symlink() and not (view / ".locks").is_symlink()
    out = hf_offline(hub_box, job)  # the baked repository, served in the view
    assert out[0] == str(view / HUB_REPO / "snapshots" / HUB_COMMIT)
    assert out[1:-1] == [data.hex() for data in HUB_BLOBS.values() for _ in range(2)]
    assert "'other/model'" in out[-1]  # and what the node held
    assert list(elsewhere.iterdir()) == []

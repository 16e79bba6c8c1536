"""bake-entrypoint in the built image under bad input: the job starts; exit codes and signals pass.

tests/image/test_entrypoint_image.py asserts what each hostile setting serves (every row of the
contract's table, BAKE_VERIFY/BAKE_REQUIRE stopping the job, SIGTERM and zombie reaping with the
default environment). What it does not cover is added here: under each bad input the job is
started, a SIGTERM sent to the container reaches it through tini, and the job's own exit code comes
back; plus inputs of our own (shell metacharacters and newlines in paths, unusable HOME, TMPDIR or
BAKE_ASSETS, over-long paths), bad flag values, and argv/stdin passing through untouched.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from tests.image import Run, docker, engine, tree_snapshot
from tests.image.test_entrypoint_image import seeded_only

pytestmark = pytest.mark.docker

# Fails if the entrypoint ran a payload planted in a path; else marks the start and waits for TERM.
# The trap is set before the start is marked: a TERM sent as soon as the mark appears finds it.
JOB = (
    "[ ! -e /tmp/injected ] || exit 99; trap 'touch /out/term; exit 77' TERM; "
    "touch /out/started; while :; do sleep 0.05; done"
)
INJECT = "$(touch /tmp/injected)`touch /tmp/injected`;touch /tmp/injected;*?[a]"
TOO_LONG = "/tmp/" + "/".join(["d" * 250] * 20)  # past PATH_MAX: nothing can be made there
LOCATIONS = {
    "XDG_CACHE_HOME": ("/job/xdg", "s3tokenizer"),
    "TIKTOKEN_RS_CACHE_DIR": ("/job/rs", ""),
    "TIKTOKEN_CACHE_DIR": ("/job/gym", ""),
    "VLLM_ASSETS_CACHE": ("/job/vllm-assets", "vllm_public_assets"),  # vLLM's public test assets
}


@dataclasses.dataclass(frozen=True)
class Case:
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    unset: tuple[str, ...] = ()  # removed by `env -u` ahead of tini, since docker run always sets HOME
    user: str | None = None
    read_only: bool = False
    tmpfs: tuple[str, ...] = ()
    workdir: str | None = None
    layout: str | None = None  # what lies at every managed location, under a bind-mounted /job


AT_JOB = {var: where for var, (where, _) in LOCATIONS.items()}
CASES = {
    # issue 5, item 6: the settings tests/image checks for what they serve
    "home-xdg-tiktoken-unset": Case(unset=("HOME", "XDG_CACHE_HOME", *list(LOCATIONS)[1:])),
    "home-xdg-tiktoken-unset-user-1234": Case(unset=("HOME", "XDG_CACHE_HOME"), user="1234:1234"),
    "spaces-in-paths": Case(
        env={
            "XDG_CACHE_HOME": "/tmp/a dir/x c",
            "TIKTOKEN_RS_CACHE_DIR": "/tmp/a dir/r c",
            "TMPDIR": "/tmp/t d",
        },
        tmpfs=("/tmp/t d",),
    ),
    "relative-xdg-cache-home": Case(env={"XDG_CACHE_HOME": "rel/cache"}, workdir="/tmp/work"),
    "user-data-directories": Case(env=AT_JOB, layout="data"),
    "user-data-behind-links": Case(env=AT_JOB, layout="data-link"),
    "file-at-every-location": Case(env=AT_JOB, layout="file"),
    "dangling-link-at-every-location": Case(env=AT_JOB, layout="dangling"),
    "read-only-root-tmpfs-tmp": Case(read_only=True, tmpfs=("/tmp",)),
    "user-1234": Case(user="1234:1234"),
    # our own
    "read-only-root-without-tmp": Case(read_only=True),
    "shell-metacharacters-in-paths": Case(
        env={
            "XDG_CACHE_HOME": f"/tmp/x{INJECT}",
            "TIKTOKEN_RS_CACHE_DIR": f"/tmp/r{INJECT}",
            "TIKTOKEN_CACHE_DIR": f"/tmp/'g' \"$HOME\" {INJECT}",
        }
    ),
    "newlines-in-paths-and-in-user-data-names": Case(
        env={**AT_JOB, "XDG_CACHE_HOME": "/tmp/line\nbreak"}, layout="data-with-newline-names"
    ),
    "home-missing-user-1234": Case(env={"HOME": "/nonexistent"}, user="1234:1234"),
    "tmpdir-missing": Case(env={"TMPDIR": "/nonexistent/tmp"}),
    "tmpdir-missing-read-only-root": Case(
        env={"TMPDIR": "/nonexistent/tmp"}, read_only=True, tmpfs=("/tmp",)
    ),
    "bake-assets-missing": Case(env={"BAKE_ASSETS": "/nowhere"}),
    "xdg-cache-home-is-a-file": Case(env={"XDG_CACHE_HOME": "/etc/hostname"}),
    "tiktoken-variables-empty": Case(env={"TIKTOKEN_RS_CACHE_DIR": "", "TIKTOKEN_CACHE_DIR": ""}),
    "paths-too-long": Case(env={"XDG_CACHE_HOME": TOO_LONG, "TIKTOKEN_RS_CACHE_DIR": TOO_LONG}),
}


def lay_out(jobdir: Path, layout: str) -> None:
    """Put ``layout`` at every managed location under ``jobdir`` (mounted at /job)."""
    for var, (where, sub) in LOCATIONS.items():
        loc = jobdir / Path(where).name / sub if sub else jobdir / Path(where).name
        loc.parent.mkdir(parents=True, exist_ok=True)
        if layout == "file":
            loc.write_bytes(b"not a directory\n")
        elif layout == "dangling":
            loc.symlink_to("/job/nowhere/gone")
        else:
            data = jobdir / "persist" / var if layout == "data-link" else loc
            (data / "nested").mkdir(parents=True)
            (data / "nested" / "kept.bin").write_bytes(b"user data\n")
            (data / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4").write_bytes(b"another vocab\n")
            if layout == "data-with-newline-names":
                (data / "two\nlines").write_bytes(b"a name with a newline\n")
            if layout == "data-link":
                loc.symlink_to(f"/job/persist/{var}")


@pytest.mark.parametrize("name", list(CASES))
def test_job_starts_and_sigterm_and_exit_code_pass_through(image: str, tmp_path: Path, name: str) -> None:
    case = CASES[name]
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # --user jobs write their markers here too
    binds = {str(out): {"bind": "/out", "mode": "rw"}}
    jobdir = tmp_path / "job"
    if case.layout:
        jobdir.mkdir()
        lay_out(jobdir, case.layout)
        binds[str(jobdir)] = {"bind": "/job", "mode": "rw"}
    # /job is a bind mount: node storage. Nothing there is changed or removed; data directories gain
    # only verified copies of the baked files and their lock files; a dangling link stays as it is.
    before = tree_snapshot(jobdir) if case.layout else None
    options = {"user": case.user or None, "read_only": case.read_only, "working_dir": case.workdir or None}
    command = ["sh", "-c", JOB]
    if case.unset:
        unset = [arg for var in case.unset for arg in ("-u", var)]
        options["entrypoint"] = ["env", *unset, "tini", "--", "bake-entrypoint"]
    container = engine().containers.run(
        image, command, detach=True, network_mode="none", volumes=binds, environment=case.env,
        tmpfs=dict.fromkeys(case.tmpfs, ""), **options,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (out / "started").exists() and container.status in ("created", "running"):
            assert time.monotonic() < deadline, "the job did not start in 30 s"
            time.sleep(0.05)
            container.reload()
        logs = container.logs(stdout=False, stderr=True).decode(errors="replace")
        assert (out / "started").exists(), f"the job never started: {logs}"
        container.kill(signal="SIGTERM")
        code = container.wait(timeout=30)["StatusCode"]
    finally:
        container.remove(force=True)
    assert (out / "term").exists(), f"SIGTERM did not reach the job: {logs}"
    assert code == 77, f"exit {code}, the job exited 77: {logs}"
    if before is not None:
        copies = seeded_only(before, tree_snapshot(jobdir))
        assert bool(copies) == case.layout.startswith("data"), copies


BAD_FLAGS = {
    "verify-maybe": ({"BAKE_VERIFY": "maybe"}, (), "BAKE_VERIFY"),
    "require-2": ({"BAKE_REQUIRE": "2"}, (), "BAKE_REQUIRE"),
    "quiet-loud": ({"BAKE_QUIET": "loud"}, (), "BAKE_QUIET"),
    "unknown-option": ({}, ("--verify",), "--verify"),
    "print-env-with-a-command": ({}, ("--print-env",), "--print-env"),
}


@pytest.mark.parametrize(("env", "before", "named"), list(BAD_FLAGS.values()), ids=list(BAD_FLAGS))
def test_bad_flag_exits_2_before_the_job(
    run: Run, tmp_path: Path, env: dict[str, str], before: tuple[str, ...], named: str
) -> None:
    tmp_path.chmod(0o777)
    proc = run(*before, "sh", "-c", "touch /out/started", env=env, binds={tmp_path: "/out"})
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "started").exists()
    assert proc.stderr.startswith("bake: error:") and named in proc.stderr


ARGV = ["", "a b", "*", "$(id)", "x\ny", "--print-env", "-v", "'", '"']


def test_argv_reaches_the_job_verbatim(run: Run) -> None:
    proc = run("printf", "[%s]", *ARGV)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "".join(f"[{arg}]" for arg in ARGV)


def test_stdin_reaches_the_job(image: str) -> None:
    payload = "line one\n\x00binary\xff\nlast line without newline"
    proc = docker("run", "-i", "--rm", "--network=none", image, "cat", stdin=payload)
    assert proc.stdout == payload


def test_job_local_view_links_a_data_entry_whose_name_holds_a_newline(run: Run, tmp_path: Path) -> None:
    (tmp_path / "rs").mkdir()
    (tmp_path / "rs" / "two\nlines").write_bytes(b"user data\n")
    (tmp_path / "rs" / "plain").write_bytes(b"user data\n")
    proc = run("python3", "-c", VIEW, env={"TIKTOKEN_RS_CACHE_DIR": "/job/rs"}, binds={tmp_path: "/job"})
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    assert view["dangling"] == []
    assert view["entries"].get("two\nlines") == "/job/rs/two\nlines"


# The job-local TIKTOKEN_RS_CACHE_DIR the entrypoint made: each entry's target, and the broken ones.
VIEW = """
import json, os
d = os.environ["TIKTOKEN_RS_CACHE_DIR"]
entries = {e: os.path.realpath(os.path.join(d, e)) for e in os.listdir(d)}
dangling = [e for e in entries if not os.path.exists(os.path.join(d, e))]
print(json.dumps({"entries": entries, "dangling": dangling}))
"""

"""bake-entrypoint in the built image: every row of the contract's table, each a `docker run --network none`.

testinfra's docker backend runs `docker exec`, which bypasses the ENTRYPOINT, so every case here
starts its own container; the job is a probe that reports, as each consumer would resolve it,
where s3tokenizer, openai-harmony and tiktoken look and whether the baked file is there (a link
into the image, or a verified copy). Bind mounts and docker volumes are real node storage: a
filesystem other than the container's `/`, so they gain copies, never links.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
import testinfra

from bake.manifest import Asset

from . import (
    ALIAS_LINKS,
    ASSET_ROOT,
    MANIFEST,
    S3_ASSET,
    S3_NAME,
    VOCAB_NAME,
    Run,
    docker,
    engine,
    tree_snapshot,
)

pytestmark = pytest.mark.docker

# Where each consumer looks, computed the way the consumer computes it.
LOCATION_PROBE = r"""
import hashlib, json, os, sys, tempfile

cfg = json.loads(sys.argv[1])


def tiktoken_dir():
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var] or None
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def look(kind, path):
    if path is None:
        return None
    target = os.path.join(path, cfg["names"][kind])
    baked = os.path.join(cfg["root"], kind, cfg["names"][kind])
    linked = os.path.isfile(target) and os.path.realpath(target) == os.path.realpath(baked)
    copied = os.path.isfile(target) and not os.path.islink(target) and sha256(target) == sha256(baked)
    info = {
        "path": os.path.abspath(path),
        "is_dir": os.path.isdir(path),
        "is_link": os.path.islink(path),
        "served": linked or copied,
        "how": "link" if linked else "copy" if copied else None,
        "size": os.path.getsize(target) if os.path.isfile(target) else None,
        "entries": None,
    }
    if info["is_dir"]:
        # bake's own hidden state (its marker, lock and stamps) is no entry a consumer reads.
        listed = [e for e in sorted(os.listdir(path)) if e != ".bake"]
        info["entries"] = {e: os.path.realpath(os.path.join(path, e)) for e in listed}
        state = os.path.join(path, ".bake")
        info["state"] = os.path.isdir(state) and not os.path.islink(state)
    if cfg["write"] and info["is_dir"]:
        scratch = os.path.join(path, "other-model.bin")
        try:
            open(scratch, "w").close()
            os.unlink(scratch)
            info["writable"] = True
        except OSError:
            info["writable"] = False
    return info


home = os.path.join(os.path.expanduser("~"), ".cache")
where = {
    "s3tokenizer": ("s3tokenizer", os.path.join(os.getenv("XDG_CACHE_HOME", home), "s3tokenizer")),
    "TIKTOKEN_RS_CACHE_DIR": (
        "tiktoken",
        os.environ.get("TIKTOKEN_RS_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "tiktoken-rs-cache"),
    ),
    "TIKTOKEN_CACHE_DIR": ("tiktoken", tiktoken_dir()),
}
print(json.dumps({
    "uid": os.getuid(),
    "cwd": os.getcwd(),
    "env": {k: os.environ.get(k) for k in ("HOME", "TMPDIR", "XDG_CACHE_HOME", *list(where)[1:])},
    "locations": {loc: look(kind, path) for loc, (kind, path) in where.items()},
}))
"""
JOB_SCRIPT = 'touch /out/job-ran && exec python3 -c "$0" "$1"'
PRINT_ENV = 'eval "$(bake-entrypoint --print-env)" && '
LOCATIONS = ("s3tokenizer", "TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR")
KINDS_OF = ("s3tokenizer", "tiktoken")
TIKTOKEN_VARS = LOCATIONS[1:]
READY = re.compile(r"^bake: assets ready in \d+ ms: (.+)$")
# Every baked file of each managed kind, by name inside its location.
BAKED = {
    kind: {PurePosixPath(a.path).name: a for a in MANIFEST if a.path.startswith(f"{kind}/")}
    for kind in KINDS_OF
}


def ready_list() -> str:
    """The ready line's list, in bake.serve's order: a file by its alias, a nested one by its directory."""
    aliases = {f"{PurePosixPath(link).parent}/{target}": link for link, target in ALIAS_LINKS.items()}
    shown: list[str] = []
    for asset in sorted(MANIFEST, key=lambda a: a.path):
        parts = asset.path.split("/")
        name = "/".join(parts[:2]) if len(parts) > 2 else asset.path
        if asset.path in aliases:
            name = aliases[asset.path].rsplit(".", 1)[0]
        if name not in shown:
            shown.append(name)
    return ", ".join(shown)


@dataclass
class Job:
    proc: subprocess.CompletedProcess[str]
    ran: bool
    report: dict | None

    def location(self, name: str) -> dict:
        assert self.report is not None, f"exit {self.proc.returncode}: {self.proc.stderr}"
        return self.report["locations"][name]

    def env(self, name: str) -> str | None:
        assert self.report is not None, f"exit {self.proc.returncode}: {self.proc.stderr}"
        return self.report["env"][name]


def start_job(
    run: Run,
    out: Path,
    *,
    argv: tuple[str, ...] = ("sh",),
    before: str = "",
    write: bool = False,
    **options: object,
) -> Job:
    """Run the location probe as the job, with ``out`` mounted at /out for its start marker.

    ``argv`` is the command before the job script's ``-c`` (for --entrypoint runs), ``before``
    is shell run ahead of it, and ``write`` has the probe create and delete a file in each location.
    """
    out.mkdir(exist_ok=True)
    out.chmod(0o777)  # --user jobs mark their start here too
    options["binds"] = {**options.get("binds", {}), out: "/out"}
    proc = run(*argv, "-c", before + JOB_SCRIPT, LOCATION_PROBE, probe_config(write), **options)
    ran = (out / "job-ran").exists()
    (out / "job-ran").unlink(missing_ok=True)
    report = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None
    return Job(proc, ran, report)


def probe_config(write: bool) -> str:
    return json.dumps(
        {"root": ASSET_ROOT, "names": {"s3tokenizer": S3_NAME, "tiktoken": VOCAB_NAME}, "write": write}
    )


@pytest.fixture
def job(run: Run, tmp_path: Path) -> Callable[..., Job]:
    """``job(**options)``: start_job with this test's own /out."""
    return functools.partial(start_job, run, tmp_path / "out")


@pytest.fixture
def jobdir(tmp_path: Path) -> Path:
    """A host directory mounted at /job, for locations that must exist before the entrypoint runs."""
    d = tmp_path / "job"
    d.mkdir()
    return d


# A vocab name no image bakes: user data in a vocab cache.
OTHER_VOCAB = "0123456789abcdef0123456789abcdef01234567"

# vLLM's public assets look under XDG_CACHE_HOME too: where a case puts XDG_CACHE_HOME on /job to
# test s3tokenizer's location, vLLM's is kept job-local (tests/test_vllm_assets_jobpath.py seeds
# vLLM's into node storage).
VLLM_ELSEWHERE = {"VLLM_ASSETS_CACHE": "/tmp/vllm-assets"}
# A location per managed kind: the job's environment and the location's path under /job.
KINDS = {
    "s3tokenizer": ({"XDG_CACHE_HOME": "/job/xdg", **VLLM_ELSEWHERE}, "xdg/s3tokenizer"),
    "TIKTOKEN_RS_CACHE_DIR": ({"TIKTOKEN_RS_CACHE_DIR": "/job/loc"}, "loc"),
    "TIKTOKEN_CACHE_DIR": ({"TIKTOKEN_CACHE_DIR": "/job/loc"}, "loc"),
}


def make_state(jobdir: Path, rel: str, state: str) -> None:
    """Lay out ``state`` at ``jobdir/rel``: missing, empty, dangling (link), file, data or data-link."""
    loc = jobdir / rel
    loc.parent.mkdir(parents=True, exist_ok=True)
    if state == "empty":
        loc.mkdir()
    elif state == "dangling":
        loc.symlink_to("/job/nowhere/gone")
    elif state == "file":
        loc.write_bytes(b"not a directory\n")
    elif state in ("data", "data-link"):
        data = jobdir / "persist" if state == "data-link" else loc
        (data / "nested").mkdir(parents=True)
        (data / "nested" / "kept.bin").write_bytes(b"nested user data\n")
        (data / OTHER_VOCAB).write_bytes(b"another vocab\n")
        (data / "speech_tokenizer_v1.onnx").write_bytes(b"another model\n")
        if state == "data-link":
            loc.symlink_to("/job/persist")


# --- nothing, an empty directory, or a dangling link, on the container's own filesystem:
# a writable real directory of links into the image

OWN = {
    "s3tokenizer": ({"XDG_CACHE_HOME": "/tmp/own/xdg"}, "/tmp/own/xdg/s3tokenizer"),
    "TIKTOKEN_RS_CACHE_DIR": ({"TIKTOKEN_RS_CACHE_DIR": "/tmp/own/loc"}, "/tmp/own/loc"),
    "TIKTOKEN_CACHE_DIR": ({"TIKTOKEN_CACHE_DIR": "/tmp/own/loc"}, "/tmp/own/loc"),
}
SETUP = {
    "missing": "mkdir -p /tmp/own",
    "empty": "mkdir -p {loc}",
    "dangling": "mkdir -p /tmp/own/xdg && ln -s /nowhere/gone {loc}",
}


@pytest.mark.parametrize("state", list(SETUP))
@pytest.mark.parametrize("kind", list(OWN))
def test_fresh_location_becomes_a_writable_directory_of_links(
    job: Callable[..., Job], kind: str, state: str
) -> None:
    env, loc_path = OWN[kind]
    # The state is laid out inside the container, on its own filesystem, before the entrypoint runs.
    setup = SETUP[state].format(loc=loc_path)
    j = job(
        env=env,
        entrypoint="sh",
        argv=("-c", f'{setup} && exec tini -- bake-entrypoint sh "$@"', "sh"),
        write=True,
    )
    loc = j.location(kind)
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert loc["path"] == loc_path  # served in place, not re-pointed
    assert (loc["is_dir"], loc["is_link"], loc["how"], loc["writable"]) == (True, False, "link", True)
    baked = BAKED["s3tokenizer" if kind == "s3tokenizer" else "tiktoken"]
    assert loc["entries"] == {
        name: f"{ASSET_ROOT}/{a.path}" for name, a in baked.items()
    }  # one link per file
    assert not loc["state"]  # a few files, each a link that proves itself: no state of bake's beside them


# --- node storage (a bind mount, a docker volume): verified copies, never a link


# bake's hidden state in a location: its directory, lock and stamps (docs/SERVE_FORMAT.md).
STATE = re.compile(r"(^|/)\.bake(/lock|/served\.[0-9a-f]{64}\.(copied|linked))?$")


def seeded_only(before: dict, after: dict) -> set[str]:
    """Assert ``after`` is ``before`` plus verified copies of baked files, bake's hidden lock and stamps,
    and the directories holding them: nothing changed, nothing removed, no link. Returns the copies.
    A stamp is bake's own, rewritten when proved anew: it is compared by kind, not by mtime."""
    baked = {asset.sha256: PurePosixPath(asset.path).name for asset in MANIFEST}
    for rel, entry in before.items():
        assert rel in after, f"{rel} was removed"
        if STATE.search(rel):
            continue
        same = after[rel][:2] == entry[:2] if stat_dir(entry) else after[rel] == entry  # a dir's mtime moves
        assert same, f"{rel} was changed"
    copies = set()
    for rel, entry in after.items():
        if rel in before or stat_dir(entry):
            continue
        name = PurePosixPath(rel).name
        if STATE.search(rel):
            assert entry[0] == 0o100000 and (name != "lock" or entry[2] == 0), (
                f"{rel}: not bake's lock or stamp"
            )
            continue
        assert baked.get(entry[3]) == name, f"{rel}: not a verified copy of a baked file"
        copies.add(rel)
    return copies


def stat_dir(entry: tuple) -> bool:
    return entry[0] == 0o040000


def without_state(snapshot: dict) -> dict:
    """A tree snapshot without bake's own state: its stamps are rewritten when a location is proved anew."""
    return {rel: entry for rel, entry in snapshot.items() if not STATE.search(rel)}


MOUNTED = {
    "s3tokenizer": ({"XDG_CACHE_HOME": "/job/xdg", **VLLM_ELSEWHERE}, "xdg/s3tokenizer"),
    "TIKTOKEN_RS_CACHE_DIR": ({"TIKTOKEN_RS_CACHE_DIR": "/job/loc"}, "loc"),
    "TIKTOKEN_CACHE_DIR": ({"TIKTOKEN_CACHE_DIR": "/job/loc"}, "loc"),
}


@pytest.mark.parametrize("state", ["missing", "empty", "data", "data-link"])
@pytest.mark.parametrize("kind", list(MOUNTED))
def test_node_storage_gains_verified_copies_and_nothing_else(
    job: Callable[..., Job], jobdir: Path, kind: str, state: str
) -> None:
    env, rel = MOUNTED[kind]
    make_state(jobdir, rel, state)
    before = tree_snapshot(jobdir)
    j = job(env={**env, "BAKE_REQUIRE": "1"}, binds={jobdir: "/job"}, write=True)
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    loc = j.location(kind)
    assert (loc["path"], loc["how"], loc["writable"]) == (f"/job/{rel}", "copy", True)
    copies = seeded_only(before, tree_snapshot(jobdir))
    data = "persist" if state == "data-link" else rel
    assert copies == {
        f"{data}/{name}" for name in BAKED["s3tokenizer" if kind == "s3tokenizer" else "tiktoken"]
    }
    # A second job on the node finds the copy and changes nothing (but, maybe, bake's stamp).
    after = without_state(tree_snapshot(jobdir))
    again = job(env=env, binds={jobdir: "/job"})
    assert again.location(kind)["how"] == "copy" and without_state(tree_snapshot(jobdir)) == after


@pytest.mark.parametrize("state", ["data", "data-link"])
@pytest.mark.parametrize("var", TIKTOKEN_VARS)
def test_seed_off_leaves_tiktoken_data_untouched_and_the_job_gets_both(
    job: Callable[..., Job], jobdir: Path, var: str, state: str
) -> None:
    env, rel = KINDS[var]
    make_state(jobdir, rel, state)
    before = tree_snapshot(jobdir)
    j = job(env={**env, "BAKE_SEED": "0"}, binds={jobdir: "/job"})
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert tree_snapshot(jobdir) == before
    assert j.env(var).startswith("/tmp/")
    loc = j.location(var)
    assert loc["how"] == "link"
    data = "/job/persist" if state == "data-link" else "/job/loc"
    assert loc["entries"] == {
        **{name: f"{ASSET_ROOT}/{a.path}" for name, a in BAKED["tiktoken"].items()},
        OTHER_VOCAB: f"{data}/{OTHER_VOCAB}",
        "nested": f"{data}/nested",
        "speech_tokenizer_v1.onnx": f"{data}/speech_tokenizer_v1.onnx",
    }


@pytest.mark.parametrize("state", ["data", "data-link"])
def test_seed_off_leaves_s3tokenizer_data_untouched_with_a_warning(
    job: Callable[..., Job], jobdir: Path, state: str
) -> None:
    env, rel = KINDS["s3tokenizer"]
    make_state(jobdir, rel, state)
    before = tree_snapshot(jobdir)
    j = job(env={**env, "BAKE_SEED": "0"}, binds={jobdir: "/job"})
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert tree_snapshot(jobdir) == before
    warnings = [line for line in j.proc.stderr.splitlines() if line.startswith("bake: warning:")]
    assert len(warnings) == 1 and f"/job/{rel}" in warnings[0] and "BAKE_SEED=0" in warnings[0]


@pytest.mark.parametrize("state", ["data", "data-link"])
def test_s3tokenizer_data_with_a_valid_model_is_used(
    job: Callable[..., Job], jobdir: Path, state: str
) -> None:
    env, rel = KINDS["s3tokenizer"]
    make_state(jobdir, rel, state)
    for name, asset in BAKED["s3tokenizer"].items():
        # "Valid" is the cheap check: a regular file of the baked size.
        ((jobdir / "persist" if state == "data-link" else jobdir / rel) / name).write_bytes(bytes(asset.size))
    before = tree_snapshot(jobdir)
    j = job(env=env, binds={jobdir: "/job"})
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert tree_snapshot(jobdir) == before
    assert "warning" not in j.proc.stderr
    assert j.location("s3tokenizer")["size"] == S3_ASSET.size


@pytest.fixture
def volume() -> Iterator[str]:
    """A docker volume, as agents mount a persistent cache; removed afterwards."""
    name = f"bake-i11sh-{uuid.uuid4().hex[:12]}"
    volume = engine().volumes.create(name)
    yield name
    volume.remove(force=True)


VOLUME_CHECK = r"""
import hashlib, json, os, sys
out = {"links": [], "files": {}}
for top, dirs, files in os.walk(sys.argv[1]):
    for name in dirs + files:
        path = os.path.join(top, name)
        rel = os.path.relpath(path, sys.argv[1])
        if os.path.islink(path):
            out["links"].append(rel)
        elif os.path.isfile(path):
            out["files"][rel] = hashlib.sha256(open(path, "rb").read()).hexdigest()
print(json.dumps(out))
"""


def test_concurrent_jobs_on_one_docker_volume_make_one_verified_copy_each(image: str, volume: str) -> None:
    """Eight containers start at once on one volume with BAKE_REQUIRE=1: none fails (a job finding a
    copy in progress waits for it), and the volume ends with one real copy per baked file and no link."""
    env = ["--env", "BAKE_REQUIRE=1", "--env", "XDG_CACHE_HOME=/cache/xdg"]
    env += ["--env", "TIKTOKEN_RS_CACHE_DIR=/cache/rs", "--env", "TIKTOKEN_CACHE_DIR=/cache/rs"]
    mount = ["--mount", f"type=volume,src={volume},dst=/cache"]
    script = 'test -f "$TIKTOKEN_RS_CACHE_DIR/$0"'
    procs = [
        subprocess.Popen(
            ["docker", "run", "--rm", "--network=none", *mount, *env, image, "sh", "-c", script, VOCAB_NAME],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    results = [(p.wait(timeout=180), p.stderr.read()) for p in procs]
    for code, stderr in results:
        assert code == 0, stderr
    check = ["run", "--rm", "--network=none", *mount, "--entrypoint", "python3", image, "-c", VOLUME_CHECK]
    listing = json.loads(docker(*check, "/cache").stdout)
    assert listing["links"] == []
    expected = {f"xdg/s3tokenizer/{name}": a.sha256 for name, a in BAKED["s3tokenizer"].items()}
    expected.update({f"rs/{name}": a.sha256 for name, a in BAKED["tiktoken"].items()})
    # vLLM's public assets, at ${XDG_CACHE_HOME}/vllm/assets/vllm_public_assets, are copied there too.
    vllm = [a for a in MANIFEST if a.path.startswith("vllm_public_assets/")]
    expected.update({f"xdg/vllm/assets/{a.path}": a.sha256 for a in vllm})
    assert {rel: sha for rel, sha in listing["files"].items() if not STATE.search(rel)} == expected


# --- a file where a directory belongs: left alone, with a warning


@pytest.mark.parametrize("kind", list(KINDS))
def test_file_where_a_directory_belongs_is_left_alone(
    job: Callable[..., Job], jobdir: Path, kind: str
) -> None:
    env, rel = KINDS[kind]
    make_state(jobdir, rel, "file")
    before = tree_snapshot(jobdir)
    j = job(env=env, binds={jobdir: "/job"})
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert tree_snapshot(jobdir) == before
    assert j.location(kind)["path"] == f"/job/{rel}"
    warnings = [line for line in j.proc.stderr.splitlines() if line.startswith("bake: warning:")]
    assert len(warnings) == 1 and f"/job/{rel}" in warnings[0]


# --- BAKE_REQUIRE=1: a location that cannot be served stops the job with exit 6

UNSERVABLE = {
    "s3tokenizer-file": ("s3tokenizer", "file", {}),
    "rs-cache-file": ("TIKTOKEN_RS_CACHE_DIR", "file", {}),
    "data-gym-file": ("TIKTOKEN_CACHE_DIR", "file", {}),
    "s3tokenizer-data-seed-off": ("s3tokenizer", "data", {"BAKE_SEED": "0"}),
    "read-only-root-no-tmp": (None, None, {"read_only": True}),
}


@pytest.mark.parametrize("case", list(UNSERVABLE))
def test_require_with_an_unservable_location_exits_6_before_the_job(
    job: Callable[..., Job], jobdir: Path, case: str
) -> None:
    kind, state, options = UNSERVABLE[case]
    options = dict(options)
    env = {"BAKE_REQUIRE": "1"}
    if "BAKE_SEED" in options:
        env["BAKE_SEED"] = options.pop("BAKE_SEED")
    if kind is not None:
        make_state(jobdir, KINDS[kind][1], state)
        env.update(KINDS[kind][0])
    j = job(env=env, binds={jobdir: "/job"}, **options)
    assert (j.proc.returncode, j.ran) == (6, False), j.proc.stderr
    assert "BAKE_REQUIRE" in j.proc.stderr
    if kind is not None:
        assert f"/job/{KINDS[kind][1]}" in j.proc.stderr


def test_require_with_servable_locations_runs_the_job(job: Callable[..., Job]) -> None:
    j = job(env={"BAKE_REQUIRE": "1"})
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr


# --- BAKE_VERIFY=1: a tampered asset stops the job with exit 3, naming the file


@pytest.mark.parametrize("asset", MANIFEST.assets, ids=lambda a: a.name)
def test_verify_with_a_tampered_asset_exits_3_before_the_job(
    job: Callable[..., Job], tmp_path: Path, asset: Asset
) -> None:
    tampered = tmp_path / "tampered"
    tampered.write_bytes(bytes(asset.size))  # same size: only the hash can tell
    j = job(env={"BAKE_VERIFY": "1"}, binds={tampered: f"{ASSET_ROOT}/{asset.path}"})
    assert (j.proc.returncode, j.ran) == (3, False), j.proc.stderr
    assert asset.path in j.proc.stderr and asset.sha256 in j.proc.stderr


def test_verify_with_intact_assets_runs_the_job(job: Callable[..., Job]) -> None:
    j = job(env={"BAKE_VERIFY": "1"})
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr


# --- the job's exit code, and the ready line


@pytest.mark.parametrize("code", [0, 1, 3, 6, 42, 255])
def test_exit_code_passes_through(run: Run, code: int) -> None:
    assert run("sh", "-c", f"exit {code}").returncode == code


def test_death_by_signal_passes_through_as_128_plus_signal(
    run: Run,
) -> None:
    assert run("sh", "-c", "kill -KILL $$").returncode == 128 + 9


def test_ready_line_is_the_only_stderr_and_stdout_is_the_jobs(
    run: Run,
) -> None:
    proc = run("echo", "job output")
    assert proc.stdout == "job output\n"
    (line,) = proc.stderr.splitlines()
    match = READY.match(line)
    assert match, line
    assert match.group(1) == ready_list()


def test_quiet_silences_the_ready_line(run: Run) -> None:
    proc = run("echo", "job output", env={"BAKE_QUIET": "1"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "job output\n", "")


# --- hostile environments: every location still served, the job still runs

ENVIRONMENTS = {
    "read-only-root-tmpfs-tmp": {"read_only": True, "tmpfs": ["/tmp"]},
    "user-1234": {"user": "1234:1234"},
    "relative-xdg": {"env": {"XDG_CACHE_HOME": "rel/cache"}, "workdir": "/tmp/work"},
    "empty-xdg": {"env": {"XDG_CACHE_HOME": ""}, "workdir": "/tmp/work"},
    "unset-home": {"entrypoint": "env", "argv": ("-u", "HOME", "tini", "--", "bake-entrypoint", "sh")},
    "unset-home-user-1234": {
        "entrypoint": "env",
        "argv": ("-u", "HOME", "tini", "--", "bake-entrypoint", "sh"),
        "user": "1234:1234",
    },
    "spaces": {
        "env": {
            "XDG_CACHE_HOME": "/tmp/a dir/xdg cache",
            "TIKTOKEN_RS_CACHE_DIR": "/tmp/a dir/rs cache",
            "TMPDIR": "/tmp/job tmp",
        },
        "tmpfs": ["/tmp/job tmp"],
    },
}


@pytest.fixture(scope="module", params=list(ENVIRONMENTS))
def hostile(
    request: pytest.FixtureRequest,
    run: Run,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[str, Job]:
    """One job per hostile environment, shared by the tests that read its report."""
    return request.param, start_job(
        run, tmp_path_factory.mktemp("out"), write=True, **ENVIRONMENTS[request.param]
    )


@pytest.mark.parametrize("location", LOCATIONS)
def test_hostile_environment_location_is_served(hostile: tuple[str, Job], location: str) -> None:
    _, j = hostile
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert j.location(location)["served"], j.proc.stderr
    assert j.location(location)["writable"]


S3_WHERE = {
    "relative-xdg": "/tmp/work/rel/cache/s3tokenizer",
    "empty-xdg": "/root/.cache/s3tokenizer",
    "unset-home": "/root/.cache/s3tokenizer",
    "spaces": "/tmp/a dir/xdg cache/s3tokenizer",
}


@pytest.mark.parametrize("hostile", list(S3_WHERE), indirect=True)
def test_s3tokenizer_is_served_where_it_resolves_its_cache(hostile: tuple[str, Job]) -> None:
    name, j = hostile
    assert (j.location("s3tokenizer")["path"], j.location("s3tokenizer")["served"]) == (S3_WHERE[name], True)


@pytest.mark.parametrize("hostile", ["unset-home", "unset-home-user-1234"], indirect=True)
def test_unset_home_case_really_runs_without_home(hostile: tuple[str, Job]) -> None:
    assert hostile[1].env("HOME") is None


@pytest.mark.parametrize(
    "name", ["read-only-root-tmpfs-tmp", "user-1234", "unset-home-user-1234"], ids=lambda n: n
)
def test_unusable_home_falls_back_to_job_local_xdg_and_says_so(job: Callable[..., Job], name: str) -> None:
    j = job(**ENVIRONMENTS[name])
    assert j.env("XDG_CACHE_HOME").startswith("/tmp/")
    (ready,) = [line for line in j.proc.stderr.splitlines() if READY.match(line)]
    assert f"XDG_CACHE_HOME={j.env('XDG_CACHE_HOME')}" in ready


# --- --print-env, as runners that bypass the ENTRYPOINT use it


@pytest.mark.parametrize("tmpdir", ["/tmp", "/tmp/it's a dir"])
def test_print_env_eval_serves_every_location(job: Callable[..., Job], tmpdir: str) -> None:
    j = job(entrypoint="sh", argv=(), before=PRINT_ENV, env={"TMPDIR": tmpdir}, tmpfs=[tmpdir])
    assert (j.proc.returncode, j.ran) == (0, True), j.proc.stderr
    assert [j.location(loc)["served"] for loc in LOCATIONS] == [True, True, True]
    assert j.env("TIKTOKEN_RS_CACHE_DIR").startswith(f"{tmpdir}/")


def test_print_env_prints_only_export_lines(run: Run) -> None:
    proc = run("--print-env", entrypoint="bake-entrypoint")
    assert proc.returncode == 0, proc.stderr
    names = [re.fullmatch(r"export ([A-Z_]+)='[^']*'", line) for line in proc.stdout.splitlines()]
    assert all(names), proc.stdout
    assert {"TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"} <= {m.group(1) for m in names}


def test_print_env_under_docker_exec(host: testinfra.host.Host) -> None:
    out = host.run(
        'eval "$(bake-entrypoint --print-env)" && python3 -c %s %s', LOCATION_PROBE, probe_config(False)
    )
    assert out.rc == 0, out.stderr
    report = json.loads(out.stdout)["locations"]
    assert [report[loc]["served"] for loc in LOCATIONS] == [True, True, True]


# --- idempotence


def test_second_run_changes_nothing(job: Callable[..., Job], jobdir: Path) -> None:
    env = {"XDG_CACHE_HOME": "/job/xdg", "TIKTOKEN_RS_CACHE_DIR": "/job/rs", "TIKTOKEN_CACHE_DIR": "/job/gym"}
    first = job(env=env, binds={jobdir: "/job"})
    after_first = without_state(tree_snapshot(jobdir))
    second = job(env=env, binds={jobdir: "/job"})
    assert (first.proc.returncode, second.proc.returncode) == (0, 0), first.proc.stderr + second.proc.stderr
    assert without_state(tree_snapshot(jobdir)) == after_first
    assert [first.location(loc)["served"] for loc in LOCATIONS] == [True, True, True]
    assert second.report["locations"] == first.report["locations"]


# --- signals and zombies under tini


def test_sigterm_reaches_the_job(image: str, tmp_path: Path) -> None:
    script = 'trap "echo TERM > /out/term; exit 143" TERM; touch /out/started; while :; do sleep 0.1; done'
    container = engine().containers.run(
        image, ["sh", "-c", script], detach=True, network_mode="none",
        volumes={str(tmp_path): {"bind": "/out", "mode": "rw"}},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "started").exists(), container.logs(stdout=False, stderr=True).decode()
        sent = time.monotonic()
        container.kill(signal="SIGTERM")
        code = container.wait(timeout=30)["StatusCode"]
        waited = time.monotonic() - sent
    finally:
        container.remove(force=True)
    assert (tmp_path / "term").read_text() == "TERM\n"
    assert code == 143
    assert waited < 5


ORPHANS = r"""
import json, os, time

for _ in range(3):
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            time.sleep(0.3)
            os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
time.sleep(1.5)
zombies = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        continue
    if state == "Z":
        zombies.append(int(pid))
print(json.dumps({"pid": os.getpid(), "zombies": zombies}))
"""


@pytest.mark.parametrize(
    ("entrypoint", "job_is_pid_1", "zombies"),
    [(None, False, 0), ("bake-entrypoint", True, 3)],
    ids=["tini", "control-without-tini"],
)
def test_orphans_are_reaped(
    run: Run,
    entrypoint: str | None,
    job_is_pid_1: bool,
    zombies: int,
) -> None:
    proc = run("python3", "-c", ORPHANS, entrypoint=entrypoint)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["pid"] == 1, len(report["zombies"])) == (job_is_pid_1, zombies)


# --- the job user cannot change the baked files

BAKED_FILES = [f"{ASSET_ROOT}/{a.path}" for a in MANIFEST] + [
    f"{ASSET_ROOT}/SHA256SUMS",
    f"{ASSET_ROOT}/bake.lock.json",
]
BAKED_DIRS = sorted({ASSET_ROOT, *(str(PurePosixPath(ASSET_ROOT, a.path).parent) for a in MANIFEST)})
TAMPER = r"""
import json, os, sys


def attempt(action):
    try:
        action()
        return "done"
    except OSError as exc:
        return type(exc).__name__

result = {}
for path in sys.argv[1:]:
    if os.path.isdir(path):
        result[path] = {
            "create": attempt(lambda: open(os.path.join(path, "planted"), "x").close()),
            "mkdir": attempt(lambda: os.mkdir(os.path.join(path, "planted-dir"))),
            "chmod": attempt(lambda: os.chmod(path, 0o777)),
        }
    else:
        result[path] = {
            "write": attempt(lambda: open(path, "r+b").close()),
            "unlink": attempt(lambda: os.unlink(path)),
            "chmod": attempt(lambda: os.chmod(path, 0o666)),
        }
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def tamper_attempts(run: Run) -> dict:
    proc = run("python3", "-c", TAMPER, *BAKED_FILES, *BAKED_DIRS, user="1234:1234")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("path", BAKED_FILES + BAKED_DIRS)
def test_non_root_job_cannot_change_baked_files(tamper_attempts: dict, path: str) -> None:
    assert set(tamper_attempts[path].values()) == {"PermissionError"}, tamper_attempts[path]

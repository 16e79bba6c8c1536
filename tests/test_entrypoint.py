"""bake-entrypoint (scripts/entrypoint.sh) on the host, under dash and busybox sh, row by row."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "entrypoint.sh"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
# Commands the script may run, besides its shell's builtins; the job uses env, sh and cat.
TOOLS = ("cat", "date", "env", "id", "ln", "mkdir", "mktemp", "rm", "sh", "sha256sum", "stat", "true")
JOB_UID = 1234
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


@dataclass(frozen=True)
class Shell:
    """A shell to run the script with, and where its external commands come from."""

    name: str
    argv: tuple[str, ...]
    tool: str | None  # a multi-call binary providing every tool, or None for the host's own


SHELLS = [
    Shell("dash", ("dash",), None),
    # busybox sh with busybox's own applets, as in a busybox-only image.
    Shell("busybox", ("busybox", "sh"), "busybox"),
]


def _require(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        pytest.fail(
            f"{program} is not installed; the entrypoint must run under it: apt-get install -y busybox dash"
        )
    return found


@pytest.fixture(params=SHELLS, ids=lambda s: s.name)
def shell(request: pytest.FixtureRequest) -> Shell:
    # Absolute, since the runs get a PATH of their own.
    program, *rest = request.param.argv
    return replace(request.param, argv=(_require(program), *rest))


def _bytes(seed: str, size: int) -> bytes:
    out = b""
    block = hashlib.sha256(seed.encode()).digest()
    while len(out) < size:
        out += block
        block = hashlib.sha256(block).digest()
    return out[:size]


def sha1(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()


# Two checkpoints and two vocabs; only o200k_base has its *.tiktoken alias.
ASSET_FILES = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": _bytes("v3", 3000),
    "s3tokenizer/speech_tokenizer_v2_25hz.onnx": _bytes("v2", 2000),
    f"tiktoken/{sha1(O200K_URL)}": _bytes("o200k", 1500),
    f"tiktoken/{sha1(CL100K_URL)}": _bytes("cl100k", 1200),
}
ALIASES = {"tiktoken/o200k_base.tiktoken": sha1(O200K_URL)}


def make_assets(root: Path, files: dict[str, bytes], aliases: dict[str, str]) -> Path:
    """Lay out a baked asset root as the image has it: SHA256SUMS, lock, alias links, 0444/0555."""
    root.mkdir(parents=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    for rel, target in aliases.items():
        (root / rel).symlink_to(target)
    sums = "".join(f"{hashlib.sha256(files[rel]).hexdigest()}  {rel}\n" for rel in sorted(files))
    (root / "SHA256SUMS").write_text(sums)
    (root / "bake.lock.json").write_text("{}\n")
    for path in sorted(root.rglob("*"), reverse=True):
        if not path.is_symlink():
            path.chmod(0o555 if path.is_dir() else 0o444)
    root.chmod(0o555)
    return root


def baked(assets: Path, kind: str) -> list[str]:
    """Return the file names SHA256SUMS lists under ``kind/``."""
    names = []
    for line in (assets / "SHA256SUMS").read_text().splitlines():
        rel = line.split("  ", 1)[1]
        if rel.startswith(kind + "/"):
            names.append(rel.split("/", 1)[1])
    return names


@dataclass
class Box:
    """A world-traversable scratch tree holding the assets, a home, a TMPDIR and a PATH of tools."""

    root: Path
    shell: Shell
    assets: Path
    home: Path
    tmp: Path
    bin: Path

    def env(self, **overrides: object) -> dict[str, str]:
        env = {
            "PATH": str(self.bin),
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "BAKE_ASSETS": str(self.assets),
        }
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env

    def argv(self, *args: str) -> list[str]:
        return [*self.shell.argv, str(SCRIPT), *args]

    def run(
        self, *args: str, uid: int | None = None, cwd: Path | None = None, **env: object
    ) -> subprocess.CompletedProcess[str]:
        prefix = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
        return subprocess.run(
            [*prefix, *self.argv(*args)],
            env=self.env(**env),
            cwd=cwd or self.root,
            capture_output=True,
            text=True,
            timeout=60,
        )


def _tool_dir(bin_dir: Path, shell: Shell) -> None:
    bin_dir.mkdir()
    for tool in TOOLS:
        source = _require(shell.tool) if shell.tool else _require("dash" if tool == "sh" else tool)
        (bin_dir / tool).symlink_to(source)


@pytest.fixture
def box(shell: Shell) -> Iterator[Box]:
    # Not pytest's tmp_path: its parents are 0700, and some cases run as another uid.
    root = Path(tempfile.mkdtemp(prefix="bake-entrypoint-"))
    root.chmod(0o755)
    tmp = root / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    home = root / "home"
    home.mkdir()
    bin_dir = root / "bin"
    _tool_dir(bin_dir, shell)
    assets = make_assets(root / "assets", ASSET_FILES, ALIASES)
    yield Box(root, shell, assets, home, tmp, bin_dir)
    shutil.rmtree(root)


def job_env(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Parse the environment the job (``env``) printed."""
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


def snapshot(path: Path) -> dict[str, tuple[object, ...]]:
    """Names, types, modes, mtimes, link targets and bytes of everything at and under ``path``."""
    out: dict[str, tuple[object, ...]] = {}

    def add(p: Path) -> None:
        st = p.lstat()
        rel = str(p.relative_to(path))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
        else:
            out[rel] = ("file", st.st_mode, st.st_mtime_ns, p.read_bytes())

    add(path)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                add(Path(dirpath, name))
    return out


def assert_serves(directory: Path, assets: Path, kind: str) -> None:
    """Every baked ``kind`` file is readable in ``directory`` with the baked bytes."""
    names = baked(assets, kind)
    assert names
    for name in names:
        assert (directory / name).read_bytes() == (assets / kind / name).read_bytes(), name


def assert_made(directory: Path, assets: Path, kind: str) -> None:
    """``directory`` is a writable real directory holding one link per baked file."""
    assert directory.is_dir() and not directory.is_symlink()
    assert os.access(directory, os.W_OK)
    for name in baked(assets, kind):
        assert (directory / name).is_symlink()
        assert (directory / name).samefile(assets / kind / name)
    assert_serves(directory, assets, kind)


def ready_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("bake: assets ready")]


# --- the contract's table, one location at a time ---------------------------------

LOCATIONS = ["s3tokenizer", "TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"]


def kind_of(location: str) -> str:
    return "s3tokenizer" if location == "s3tokenizer" else "tiktoken"


def place(box: Box, location: str) -> Path:
    """A path, with a space in it, for ``location``; s3tokenizer's must end in /s3tokenizer."""
    return box.root / "cache dir" / ("s3tokenizer" if location == "s3tokenizer" else "tiktoken")


def point_at(location: str, path: Path) -> dict[str, str]:
    """The environment that makes ``path`` the managed location."""
    if location == "s3tokenizer":
        assert path.name == "s3tokenizer"
        return {"XDG_CACHE_HOME": str(path.parent)}
    return {location: str(path)}


def consumer_dir(location: str, env: dict[str, str], cwd: Path) -> Path:
    """Where the consumer of ``location`` looks, resolved the way it resolves it."""
    if location == "s3tokenizer":
        # s3tokenizer: os.getenv("XDG_CACHE_HOME", expanduser("~/.cache")) joined with "s3tokenizer".
        return cwd / env.get("XDG_CACHE_HOME", str(Path(env["HOME"], ".cache"))) / "s3tokenizer"
    return cwd / env[location]


def fill_data(directory: Path, location: str) -> None:
    """User data: a file, a hidden file, a nested file, names with a newline and glob characters and,
    for tiktoken, a bad copy under a baked name."""
    directory.mkdir(parents=True)
    (directory / "user-file.bin").write_bytes(b"user bytes")
    (directory / "two\nlines").write_bytes(b"newline in the name")
    (directory / "star*[x]?").write_bytes(b"glob characters in the name")
    (directory / ".lock").write_bytes(b"")
    (directory / "sub").mkdir()
    (directory / "sub" / "nested").write_bytes(b"nested")
    if location != "s3tokenizer":
        (directory / sha1(O200K_URL)).write_bytes(b"stale vocab")


@pytest.mark.parametrize("location", LOCATIONS)
@pytest.mark.parametrize("state", ["nothing", "empty directory", "dangling link"])
def test_empty_location_becomes_a_real_directory_of_links(box: Box, location: str, state: str) -> None:
    loc = place(box, location)
    loc.parent.mkdir()
    if state == "empty directory":
        loc.mkdir()
    elif state == "dangling link":
        loc.symlink_to(box.root / "gone")

    result = box.run("env", **point_at(location, loc))

    env = job_env(result)
    assert_made(loc, box.assets, kind_of(location))
    assert consumer_dir(location, env, box.root) == loc
    assert not (box.root / "gone").exists()
    assert len(ready_lines(result.stderr)) == 1 and "warning" not in result.stderr


@pytest.mark.parametrize("location", LOCATIONS)
@pytest.mark.parametrize("behind_link", [False, True], ids=["data directory", "data behind a link"])
def test_data_is_never_written_into(box: Box, location: str, behind_link: bool) -> None:
    volume = box.root / "volume"
    data = volume / "data"
    fill_data(data, location)
    if behind_link:
        loc = place(box, location)
        loc.parent.mkdir()
        loc.symlink_to(data)
    else:
        loc = data if location != "s3tokenizer" else volume / "s3tokenizer"
        if location == "s3tokenizer":
            data.rename(loc)
            data = loc
    before = snapshot(volume), snapshot(loc)

    result = box.run("env", **point_at(location, loc))

    env = job_env(result)
    assert (snapshot(volume), snapshot(loc)) == before
    if location == "s3tokenizer":
        # No valid copy there: a warning naming it, and the job still runs.
        assert f"bake: warning: {loc}:" in result.stderr
        assert "1 location(s) not served" in ready_lines(result.stderr)[0]
        return
    # Re-pointed for this job only, to a job-local directory serving the baked files and the data.
    served = consumer_dir(location, env, box.root)
    assert served.parent.parent == box.tmp
    assert_made(served, box.assets, "tiktoken")
    for entry in data.iterdir():
        if entry.name not in baked(box.assets, "tiktoken"):
            assert (served / entry.name).samefile(entry)
    assert f"{location}={served} (job-local, {loc} left as is)" in result.stderr
    assert "warning" not in result.stderr


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_directory_of_only_baked_links_is_completed(box: Box, location: str) -> None:
    # What a concurrent first run, or an image that baked fewer files, leaves behind: not user data.
    kind = kind_of(location)
    loc = place(box, location)
    loc.mkdir(parents=True)
    first = baked(box.assets, kind)[0]
    (loc / first).symlink_to(box.assets / kind / first)

    env = job_env(box.run("env", **point_at(location, loc)))

    assert consumer_dir(location, env, box.root) == loc
    assert_made(loc, box.assets, kind)


def test_s3tokenizer_data_with_a_valid_copy_is_used(box: Box) -> None:
    loc = box.root / "volume" / "s3tokenizer"
    fill_data(loc, "s3tokenizer")
    # "Valid" is a regular file of the baked size; the full hash is BAKE_VERIFY's job.
    for name in baked(box.assets, "s3tokenizer"):
        shutil.copyfile(box.assets / "s3tokenizer" / name, loc / name)
    before = snapshot(loc)

    result = box.run("env", BAKE_REQUIRE=1, **point_at("s3tokenizer", loc))

    env = job_env(result)
    assert snapshot(loc) == before
    assert consumer_dir("s3tokenizer", env, box.root) == loc
    assert_serves(loc, box.assets, "s3tokenizer")
    assert "warning" not in result.stderr


def test_s3tokenizer_data_with_a_wrong_size_copy_warns(box: Box) -> None:
    loc = box.root / "volume" / "s3tokenizer"
    fill_data(loc, "s3tokenizer")
    name = baked(box.assets, "s3tokenizer")[0]
    (loc / name).write_bytes(b"truncated")
    before = snapshot(loc)

    result = box.run("env", **point_at("s3tokenizer", loc))

    assert result.returncode == 0
    assert snapshot(loc) == before
    assert f"bake: warning: {loc}: expected a directory serving" in result.stderr
    assert name in result.stderr


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_file_where_a_directory_belongs_is_left_alone(box: Box, location: str) -> None:
    loc = place(box, location)
    loc.parent.mkdir()
    loc.write_bytes(b"not a directory")
    before = snapshot(loc.parent)

    result = box.run("env", **point_at(location, loc))

    env = job_env(result)
    assert snapshot(loc.parent) == before
    assert f"bake: warning: {loc}: expected a directory serving" in result.stderr
    assert "a file where a directory belongs" in result.stderr
    if location != "s3tokenizer":
        assert env[location] == str(loc)


def test_unset_tiktoken_variables_get_private_job_local_directories(box: Box) -> None:
    result = box.run("env", TIKTOKEN_RS_CACHE_DIR=None, TIKTOKEN_CACHE_DIR=None)

    env = job_env(result)
    job_dirs = {Path(env[var]).parent for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR")}
    assert job_dirs == {box.tmp / f"bake-{os.geteuid()}"}
    assert stat.S_IMODE((box.tmp / f"bake-{os.geteuid()}").stat().st_mode) == 0o700
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"):
        assert_made(Path(env[var]), box.assets, "tiktoken")


@pytest.mark.parametrize("var", ["TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"])
def test_empty_tiktoken_variable_is_exported_job_local(box: Box, var: str) -> None:
    # tiktoken reads "" as "caching off, download every time"; the baked vocab is served instead.
    env = job_env(box.run("env", **{var: ""}))

    assert Path(env[var]).parent == box.tmp / f"bake-{os.geteuid()}"
    assert_made(Path(env[var]), box.assets, "tiktoken")


@pytest.mark.parametrize("var", ["TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"])
def test_tiktoken_location_that_cannot_be_made_is_repointed_job_local(box: Box, var: str) -> None:
    # Not even root can make a directory under /proc; harmony would fail on a set, missing directory.
    env = job_env(result := box.run("env", **{var: "/proc/bake-cannot-exist"}))

    assert Path(env[var]).parent == box.tmp / f"bake-{os.geteuid()}"
    assert_made(Path(env[var]), box.assets, "tiktoken")
    assert f"{var}={env[var]} (job-local, /proc/bake-cannot-exist left as is)" in result.stderr


def test_unusable_tmpdir_leaves_unset_tiktoken_variables_unserved(box: Box) -> None:
    not_a_dir = box.root / "tmp file"
    not_a_dir.write_bytes(b"")

    plain = box.run(*marker_job(box), TMPDIR=not_a_dir)
    required = box.run("true", TMPDIR=not_a_dir, BAKE_REQUIRE=1)

    assert plain.returncode == 0 and (box.root / "job-ran").exists()
    assert "bake: warning: $TIKTOKEN_RS_CACHE_DIR (unset): expected a directory serving" in plain.stderr
    assert "2 location(s) not served" in ready_lines(plain.stderr)[0]
    assert required.returncode == 6
    assert "BAKE_REQUIRE=1: 2 location(s)" in required.stderr


def test_concurrent_first_runs_all_succeed(box: Box) -> None:
    procs = [
        subprocess.Popen(
            box.argv("env"), env=box.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    results = [(p.wait(timeout=60), *p.communicate()) for p in procs]

    for code, _, stderr in results:
        assert code == 0 and "warning" not in stderr, stderr
    assert len({out for _, out, _ in results}) == 1
    assert_made(box.home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")


# --- runner mode, idempotence, paths -----------------------------------------------


def test_print_env_is_safe_to_eval(box: Box) -> None:
    tmp = box.root / "it's a $tmp `dir`"
    tmp.mkdir()
    env = box.env(TMPDIR=tmp)

    printed = subprocess.run(box.argv("--print-env"), env=env, capture_output=True, text=True, check=True)
    runner = subprocess.run(
        ["sh", "-c", 'eval "$("$@")" && exec env', "runner", *box.argv("--print-env")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    lines = printed.stdout.splitlines()
    assert {line.split("=", 1)[0] for line in lines} == {
        "export TIKTOKEN_RS_CACHE_DIR",
        "export TIKTOKEN_CACHE_DIR",
    }
    assert all(re.fullmatch(r"export [A-Z_]+='([^']|'\\'')*'", line) for line in lines), lines
    seen = dict(line.split("=", 1) for line in runner.stdout.splitlines())
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"):
        assert Path(seen[var]).parent == tmp / f"bake-{os.geteuid()}"
        assert_made(Path(seen[var]), box.assets, "tiktoken")
    assert_made(box.home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")
    assert len(ready_lines(printed.stderr)) == 1


def test_print_env_prints_nothing_it_did_not_set(box: Box) -> None:
    rs = box.root / "rs"
    gym = box.root / "gym"
    result = box.run("--print-env", TIKTOKEN_RS_CACHE_DIR=rs, TIKTOKEN_CACHE_DIR=gym)

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert_made(rs, box.assets, "tiktoken")
    assert_made(gym, box.assets, "tiktoken")


@pytest.mark.parametrize("scenario", ["fresh", "data everywhere", "print-env eval'd"])
def test_idempotent(box: Box, scenario: str) -> None:
    env: dict[str, object] = {}
    if scenario == "data everywhere":
        fill_data(box.root / "volume" / "tk", "TIKTOKEN_RS_CACHE_DIR")
        fill_data(box.root / "volume" / "s3tokenizer", "s3tokenizer")
        env = {"TIKTOKEN_RS_CACHE_DIR": box.root / "volume" / "tk", "XDG_CACHE_HOME": box.root / "volume"}
    if scenario == "print-env eval'd":
        # The second run sees the variables the first exported.
        first = job_env(box.run("env"))
        env = {var: first[var] for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR")}
    else:
        first = job_env(box.run("env", **env))
    after_first = snapshot(box.root)

    second = box.run("env", **env)

    assert snapshot(box.root) == after_first
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR", "XDG_CACHE_HOME"):
        assert job_env(second).get(var) == first.get(var)
    assert second.stderr.count("\n") == 1 + (scenario == "data everywhere"), second.stderr


def test_relative_tiktoken_data_and_tmpdir(box: Box) -> None:
    fill_data(box.root / "volume" / "tk", "TIKTOKEN_CACHE_DIR")
    before = snapshot(box.root / "volume")

    env = job_env(box.run("env", TIKTOKEN_CACHE_DIR="volume/tk", TMPDIR="tmp"))

    served = Path(env["TIKTOKEN_CACHE_DIR"])
    assert served.parent == box.tmp / f"bake-{os.geteuid()}"
    assert snapshot(box.root / "volume") == before
    assert_made(served, box.assets, "tiktoken")
    # Links are absolute, so the job may change directory.
    assert all(os.readlink(link).startswith("/") for link in served.iterdir())
    assert (served / "user-file.bin").samefile(box.root / "volume" / "tk" / "user-file.bin")


def test_relative_xdg_cache_home_resolves_against_the_working_directory(box: Box) -> None:
    work = box.root / "work dir"
    work.mkdir()

    env = job_env(box.run("env", cwd=work, XDG_CACHE_HOME="rel cache"))

    assert env["XDG_CACHE_HOME"] == "rel cache"
    assert consumer_dir("s3tokenizer", env, work) == work / "rel cache" / "s3tokenizer"
    assert_made(work / "rel cache" / "s3tokenizer", box.assets, "s3tokenizer")
    assert not (box.home / ".cache").exists()


def test_empty_xdg_cache_home_is_exported_as_the_home_cache(box: Box) -> None:
    # s3tokenizer would read "" as the working directory; the entrypoint makes both agree.
    env = job_env(box.run("env", XDG_CACHE_HOME=""))

    assert env["XDG_CACHE_HOME"] == str(box.home / ".cache")
    assert_made(box.home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")


def test_paths_with_spaces_and_quotes(box: Box) -> None:
    odd = box.root / "a 'b' \"c\" $d"
    odd.mkdir()
    assets = odd / "baked assets"
    shutil.copytree(box.assets, assets, symlinks=True)
    home = odd / "home dir"
    home.mkdir()
    tmp = odd / "tmp dir"
    tmp.mkdir()

    env = job_env(box.run("env", BAKE_ASSETS=assets, HOME=home, TMPDIR=tmp))

    assert_made(home / ".cache" / "s3tokenizer", assets, "s3tokenizer")
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"):
        assert Path(env[var]).parent == tmp / f"bake-{os.geteuid()}"
        assert_made(Path(env[var]), assets, "tiktoken")


def test_relative_bake_assets_links_absolutely(box: Box) -> None:
    env = job_env(box.run("env", BAKE_ASSETS="assets"))

    assert_made(box.home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")
    assert_made(Path(env["TIKTOKEN_CACHE_DIR"]), box.assets, "tiktoken")


# --- HOME fallbacks -----------------------------------------------------------------


def test_unset_home_uses_the_password_database(box: Box) -> None:
    home = box.root / "passwd home"
    uid = os.geteuid()
    getent = box.bin / "getent"
    getent.write_text(
        f'#!/bin/sh\n[ "$1 $2" = "passwd {uid}" ] && echo "job:x:{uid}:{uid}:job:{home}:/bin/sh"\n'
    )
    getent.chmod(0o755)

    env = job_env(box.run("env", HOME=None))

    assert "HOME" not in env and "XDG_CACHE_HOME" not in env
    assert_made(home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")


@needs_root
def test_unset_home_reads_etc_passwd_without_getent(box: Box) -> None:
    nobody = next(
        line.split(":") for line in Path("/etc/passwd").read_text().splitlines() if line.startswith("nobody:")
    )
    uid, pw_home = int(nobody[2]), nobody[5]
    if os.access(pw_home, os.F_OK):
        pytest.skip(f"nobody's home {pw_home} exists here; this case needs it absent")

    result = box.run("env", uid=uid, HOME=None)

    env = job_env(result)
    # Its passwd home cannot be created, so XDG_CACHE_HOME goes job-local, and the ready line says why.
    assert env["XDG_CACHE_HOME"] == str(box.tmp / f"bake-{uid}" / "xdg-cache")
    assert f"(job-local: {pw_home}/.cache/s3tokenizer cannot be created)" in ready_lines(result.stderr)[0]
    assert_made(Path(env["XDG_CACHE_HOME"]) / "s3tokenizer", box.assets, "s3tokenizer")


@needs_root
@pytest.mark.parametrize("home", [None, "/"], ids=["HOME unset, no passwd entry", "HOME=/ unwritable"])
def test_job_user_without_a_usable_home(box: Box, home: str | None) -> None:
    result = box.run("env", uid=JOB_UID, HOME=home)

    env = job_env(result)
    job = box.tmp / f"bake-{JOB_UID}"
    assert env["XDG_CACHE_HOME"] == str(job / "xdg-cache")
    assert "XDG_CACHE_HOME=" in ready_lines(result.stderr)[0]
    assert job.stat().st_uid == JOB_UID and stat.S_IMODE(job.stat().st_mode) == 0o700
    assert_made(job / "xdg-cache" / "s3tokenizer", box.assets, "s3tokenizer")
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"):
        assert Path(env[var]).parent == job
    printed = box.run("--print-env", uid=JOB_UID, HOME=home)
    assert f"export XDG_CACHE_HOME='{job}/xdg-cache'" in printed.stdout.splitlines()
    # The job user reads the root-owned 0444 baked files through the links, and cannot write them.
    link = f"{job}/xdg-cache/s3tokenizer/{baked(box.assets, 's3tokenizer')[0]}"
    as_job = [SETPRIV, f"--reuid={JOB_UID}", f"--regid={JOB_UID}", "--clear-groups", "sh", "-c"]
    read = subprocess.run([*as_job, 'cat "$1"', "job", link], capture_output=True)
    write = subprocess.run([*as_job, ': >> "$1"', "job", link], capture_output=True)
    assert read.returncode == 0 and read.stdout == Path(link).read_bytes()
    assert write.returncode != 0


@needs_root
def test_read_only_home_falls_back_to_job_local(box: Box) -> None:
    # A read-only root filesystem, seen from HOME: a private mount namespace makes it read-only.
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    wrapper = 'mount --bind "$HOME" "$HOME" && mount -o remount,bind,ro "$HOME" && exec "$@"'
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", wrapper, "ro", *box.argv("env")],
        env={**box.env(), "PATH": f"{box.bin}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )

    env = job_env(result)
    assert env["XDG_CACHE_HOME"] == str(box.tmp / f"bake-{os.geteuid()}" / "xdg-cache")
    assert f"(job-local: {box.home}/.cache/s3tokenizer cannot be created)" in result.stderr
    assert list(box.home.iterdir()) == []


@needs_root
@pytest.mark.parametrize("plant", ["directory owned by someone else", "symlink"])
def test_shared_tmp_name_taken_by_someone_else(box: Box, plant: str) -> None:
    job_home = box.root / "job home"
    job_home.mkdir()
    os.chown(job_home, JOB_UID, JOB_UID)
    victim = box.root / "victim"
    victim.mkdir(mode=0o777)
    victim.chmod(0o777)
    planted = box.tmp / f"bake-{JOB_UID}"
    if plant == "symlink":
        planted.symlink_to(victim)
    else:
        planted.mkdir()
        planted.chmod(0o777)
    before = snapshot(planted), snapshot(victim)

    env = job_env(box.run("env", uid=JOB_UID, HOME=job_home))

    assert (snapshot(planted), snapshot(victim)) == before
    for var in ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR"):
        private = Path(env[var]).parent
        assert private.parent == box.tmp and private.name.startswith(f"bake-{JOB_UID}.")
        assert private.stat().st_uid == JOB_UID and stat.S_IMODE(private.stat().st_mode) == 0o700
        assert_made(Path(env[var]), box.assets, "tiktoken")


# --- BAKE_VERIFY, BAKE_REQUIRE, BAKE_QUIET, missing assets ----------------------------


def marker_job(box: Box, code: int = 0) -> list[str]:
    return ["sh", "-c", f': > "{box.root}/job-ran"; exit {code}']


def tamper(box: Box, rel: str) -> None:
    path = box.assets / rel
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF  # same size, so only the hash can tell
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("rel", list(ASSET_FILES))
def test_verify_rejects_a_tampered_asset(box: Box, rel: str) -> None:
    good = hashlib.sha256(ASSET_FILES[rel]).hexdigest()
    tamper(box, rel)

    result = box.run(*marker_job(box), BAKE_VERIFY=1)

    assert result.returncode == 3
    assert not (box.root / "job-ran").exists()
    assert f"{box.assets}/{rel}: expected sha256 {good}" in result.stderr
    assert "job not started" in result.stderr


def test_verify_passes_clean_assets(box: Box) -> None:
    result = box.run(*marker_job(box), BAKE_VERIFY=1)

    assert result.returncode == 0, result.stderr
    assert (box.root / "job-ran").exists()


@pytest.mark.parametrize("location", LOCATIONS)
def test_require_stops_the_job_when_a_location_cannot_be_served(box: Box, location: str) -> None:
    loc = place(box, location)
    loc.parent.mkdir()
    loc.write_bytes(b"not a directory")

    result = box.run(*marker_job(box), BAKE_REQUIRE=1, **point_at(location, loc))

    assert result.returncode == 6
    assert not (box.root / "job-ran").exists()
    assert f"bake: error: {loc}: expected a directory serving" in result.stderr
    assert "BAKE_REQUIRE=1: 1 location(s)" in result.stderr


def test_require_stops_the_job_for_s3tokenizer_data_without_the_file(box: Box) -> None:
    fill_data(box.root / "volume" / "s3tokenizer", "s3tokenizer")

    result = box.run(*marker_job(box), BAKE_REQUIRE=1, XDG_CACHE_HOME=box.root / "volume")

    assert result.returncode == 6
    assert not (box.root / "job-ran").exists()
    assert f"{box.root}/volume/s3tokenizer: expected a directory serving" in result.stderr


def test_require_runs_the_job_when_everything_is_served(box: Box) -> None:
    result = box.run(*marker_job(box), BAKE_REQUIRE=1, BAKE_VERIFY=1)

    assert result.returncode == 0, result.stderr
    assert (box.root / "job-ran").exists()


@pytest.mark.parametrize(
    ("flags", "code"),
    [({}, 0), ({"BAKE_REQUIRE": 1}, 6), ({"BAKE_VERIFY": 1}, 3)],
    ids=["plain", "BAKE_REQUIRE", "BAKE_VERIFY"],
)
@pytest.mark.parametrize("where", ["missing", "no SHA256SUMS", "empty SHA256SUMS"])
def test_missing_assets(box: Box, flags: dict[str, int], code: int, where: str) -> None:
    assets = box.root / "elsewhere"
    if where != "missing":
        assets.mkdir()
    if where == "empty SHA256SUMS":
        (assets / "SHA256SUMS").write_text("")

    result = box.run(*marker_job(box), BAKE_ASSETS=assets, **flags)

    assert result.returncode == code
    assert (box.root / "job-ran").exists() == (code == 0)
    assert f"BAKE_ASSETS={assets}: expected the baked asset directory" in result.stderr
    assert not (box.home / ".cache").exists()


def test_quiet_prints_nothing(box: Box) -> None:
    result = box.run("true", BAKE_QUIET=1)

    assert result.returncode == 0
    assert result.stderr == ""
    assert_made(box.home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")


def test_ready_line_names_every_baked_asset(box: Box) -> None:
    result = box.run("true")

    assert result.returncode == 0
    expected = ", ".join(
        [f"s3tokenizer/{name}" for name in baked(box.assets, "s3tokenizer")]
        + [
            f"tiktoken/{'o200k_base' if name == sha1(O200K_URL) else name}"
            for name in baked(box.assets, "tiktoken")
        ]
    )
    assert re.fullmatch(rf"bake: assets ready in \d+ ms: {re.escape(expected)}\n", result.stderr), (
        result.stderr
    )


@pytest.mark.parametrize("kind", ["s3tokenizer", "tiktoken"])
def test_only_one_kind_baked_leaves_the_other_alone(box: Box, kind: str) -> None:
    files = {rel: data for rel, data in ASSET_FILES.items() if rel.startswith(kind + "/")}
    aliases = {rel: t for rel, t in ALIASES.items() if rel.startswith(kind + "/")}
    assets = make_assets(box.root / "one kind", files, aliases)

    result = box.run("env", BAKE_ASSETS=assets, BAKE_REQUIRE=1)

    env = job_env(result)
    assert ("TIKTOKEN_CACHE_DIR" in env) == (kind == "tiktoken")
    assert (box.home / ".cache").exists() == (kind == "s3tokenizer")
    other = "tiktoken/" if kind == "s3tokenizer" else "s3tokenizer/"
    assert other not in ready_lines(result.stderr)[0]


# --- handing over to the job --------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 7, 255])
def test_job_exit_code_passes_through(box: Box, code: int) -> None:
    result = box.run(*marker_job(box, code))

    assert result.returncode == code
    assert (box.root / "job-ran").exists()


def test_job_replaces_the_entrypoint(box: Box) -> None:
    proc = subprocess.Popen(box.argv("sh", "-c", "echo $$"), env=box.env(), stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)

    assert proc.returncode == 0
    assert int(out) == proc.pid


def test_no_command_sets_up_and_exits_zero(box: Box) -> None:
    result = box.run()

    assert result.returncode == 0
    assert result.stdout == ""
    assert len(ready_lines(result.stderr)) == 1
    assert_made(box.home / ".cache" / "s3tokenizer", box.assets, "s3tokenizer")


def test_help(box: Box) -> None:
    result = box.run("--help")

    assert result.returncode == 0
    assert result.stdout.startswith("usage: bake-entrypoint")


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--bogus"], {}, "unknown option '--bogus'"),
        (["--", "true"], {}, "unknown option '--'"),
        (["--print-env", "true"], {}, "--print-env takes no command, saw 'true'"),
        (["true"], {"BAKE_VERIFY": "maybe"}, "BAKE_VERIFY='maybe': expected 1 (on) or 0 (off)"),
        (["true"], {"BAKE_QUIET": "2"}, "BAKE_QUIET='2': expected 1 (on) or 0 (off)"),
    ],
    ids=["unknown option", "double dash", "print-env with a command", "bad BAKE_VERIFY", "bad BAKE_QUIET"],
)
def test_bad_usage_exits_2(box: Box, args: list[str], env: dict[str, str], said: str) -> None:
    result = box.run(*args, **env)

    assert result.returncode == 2
    assert f"bake: error: {said}" in result.stderr
    assert not (box.home / ".cache").exists()


# --- lint and cost ------------------------------------------------------------------


def test_shellcheck_clean() -> None:
    shellcheck = _require("shellcheck")
    result = subprocess.run([shellcheck, "--shell=sh", str(SCRIPT)], capture_output=True, text=True)

    assert result.returncode == 0, result.stdout


def _median_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def test_overhead_of_entrypoint_true(box: Box, capsys: pytest.CaptureFixture[str]) -> None:
    """Reports the median of 200 `bake-entrypoint true` runs against `true` (set-up already done)."""
    env = box.env()
    subprocess.run(box.argv("true"), env=env, check=True, capture_output=True)
    entry = _median_ms(box.argv(str(box.bin / "true")), env, 200)
    bare = _median_ms([str(box.bin / "true")], env, 200)
    with capsys.disabled():
        print(f"\n[{box.shell.name}] bake-entrypoint true: {entry:.2f} ms, true: {bare:.2f} ms", end="")
        print(f", overhead {entry - bare:.2f} ms")

"""bake-entrypoint under racing jobs and hostile environments (issue 10, defect 10), on the host.

- Twenty jobs starting at once on one node never exit 6: a concurrent `mkdir` is no failure.
- Many jobs seeding one shared node directory at once: exactly one copy per file, by one job the
  others wait for; no partial ever visible at a final name; none exits 6.
- Job-local directories are private to each job, never shared per uid.
- No value of any variable (newlines, spaces, glob characters, leading dashes, `..`, relative
  paths, command substitutions) leads to a write or a delete outside the directories the
  entrypoint manages: the whole scratch tree is compared before and after.
- A SHA256SUMS with CRLF line endings, or a line with `../`, gets a precise reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import nolock
from tests.serve import (
    AssetMaker,
    Box,
    Shell,
    content,
    job_env,
    new_box,
    sealed,
    shell_and_box,
    snapshot,
)

VOCAB = "tiktoken/fb374d419588a4632f3f557e76b4b70aebbca790"
FILES = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": content("v3", 3000),
    VOCAB: content("o200k", 1500),
    "nltk/corpora/tiny/words.txt": content("words", 900),
}
# Big enough that copies overlap in time when many jobs start at once.
BIG = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": content("v3", 6 * 1024 * 1024),
    VOCAB: content("o200k", 4 * 1024 * 1024),
    "nltk/corpora/tiny/words.txt": content("words", 3 * 1024 * 1024),
}
EXPORT_VARS = ("TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR", "NLTK_DATA")
EXAMPLES = int(os.environ.get("BAKE_HYPOTHESIS_EXAMPLES", "25"))


DECLARED = {"nltk": "$NLTK_DATA"}
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def baked(files: dict[str, bytes]) -> AssetMaker:
    """``files`` sealed by `bake seal`, with the vocab's URL and a declared `$NLTK_DATA` consumer."""
    return sealed(files, {VOCAB: O200K_URL}, DECLARED)


shell, box = shell_and_box(baked(FILES))


def start_all(box: Box, count: int, **env: object) -> list[tuple[int, str, str]]:
    """Start ``count`` entrypoint jobs (`env` as the job) at once; return each (code, stdout, stderr)."""
    gate = box.root / "gate"
    gate.mkdir(exist_ok=True)
    # Each waits on the same FIFO, so all of them start as close together as the kernel allows.
    fifo = gate / "go"
    if not fifo.exists():
        os.mkfifo(fifo)
    argv = ["sh", "-c", 'read -r _ < "$0"; exec "$@"', str(fifo), *box.argv("env")]
    procs = [
        subprocess.Popen(
            argv,
            env=box.env(PATH=f"{box.bin}:/usr/bin:/bin", **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(count)
    ]
    time.sleep(0.3)
    with fifo.open("w") as go:
        go.write("\n" * count)
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, out.decode(), err.decode()))
    return results


@pytest.mark.parametrize("round_", range(3))
def test_twenty_jobs_at_once_on_a_fresh_node_never_exit_6(box: Box, round_: int) -> None:
    results = start_all(box, 20, BAKE_REQUIRE=1)

    for code, _, stderr in results:
        assert code == 0, stderr
        assert "warning" not in stderr and "error" not in stderr, stderr
    cache = box.home / ".cache" / "s3tokenizer"
    assert os.readlink(cache / "speech_tokenizer_v3_25hz.onnx") == str(box.assets / FILES_S3)
    # Each job got job-local directories of its own: twenty jobs, twenty distinct directories.
    for var in EXPORT_VARS:
        dirs = {job_result(code, out, err)[var] for code, out, err in results}
        assert len(dirs) == 20
        assert all(Path(d).parent == box.tmp and (Path(d).stat().st_mode & 0o777) == 0o700 for d in dirs)


FILES_S3 = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"


def job_result(code: int, out: str, err: str) -> dict[str, str]:
    return job_env(subprocess.CompletedProcess([], code, out, err))


def watch(directory: Path, names: dict[str, bytes], stop: threading.Event, seen: list[str]) -> None:
    """Read every baked name that exists in ``directory`` until ``stop``; record any partial content."""
    while not stop.is_set():
        for name, data in names.items():
            try:
                got = (directory / name).read_bytes()
            except FileNotFoundError:
                continue
            if got != data:
                seen.append(f"{name}: {len(got)} of {len(data)} bytes at the final name")


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slow-disk shim: each write under a directory first sleeps (tests/nolock/slowwrite.c)."""
    return nolock.build(tmp_path_factory.mktemp("slow"), nolock.HERE / "slowwrite.c")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("count", [12])
def test_many_jobs_seeding_one_shared_directory_at_once(shell: Shell, slow: Path, count: int) -> None:
    box = new_box(shell, baked(BIG))
    try:
        shared = box.root / "node cache"
        shared.mkdir()
        (shared / "someone else's model.bin").write_bytes(b"node data")
        before = snapshot(shared)
        names = {
            path.split("/", 1)[1]: data for path, data in BIG.items() if not path.startswith("s3tokenizer/")
        }
        stop, partials = threading.Event(), []
        watcher = threading.Thread(target=watch, args=(shared, names, stop, partials))
        watcher.start()
        try:
            # Every $VAR location on the one shared directory, as runners that share a cache set them;
            # a disk slow enough (0.3 s a write) that the copy is still in progress as the others start.
            env = {var: shared for var in EXPORT_VARS} | nolock.slow_disk(slow, shared, 300)
            started = time.monotonic()
            results = start_all(box, count, BAKE_REQUIRE=1, **env)
            took = time.monotonic() - started
        finally:
            stop.set()
            watcher.join()

        assert partials == []
        for code, out, err in results:
            assert code == 0, err  # never 6: a job finding a copy in progress waits for it
            served = job_result(code, out, err)
            for var in EXPORT_VARS:
                where = Path(served[var])
                assert where == shared or where.parent == box.tmp
                prefix = "nltk/" if var == "NLTK_DATA" else "tiktoken/"
                for path, data in BIG.items():
                    if path.startswith(prefix):
                        assert (where / path.split("/", 1)[1]).read_bytes() == data
        # Exactly one copy of each file: a real file, once, with no second name and no partial left.
        for name, data in names.items():
            path = shared / name
            assert not path.is_symlink() and path.read_bytes() == data and path.stat().st_nlink == 1
        assert not [p for p in shared.rglob("*") if "bake-partial" in p.name or p.is_symlink()]
        after = snapshot(shared, dir_mtimes=False)
        for rel, entry in before.items():
            assert after[rel][:2] == entry[:2] and (entry[0] == "dir" or after[rel] == entry), rel
        added = {rel for rel in after if rel not in before}
        # bake's hidden state: one lock, and one stamp per consumer served there.
        state = {".bake", ".bake/lock"} | {
            r for r in added if re.fullmatch(r"\.bake/served\.[0-9a-f]{64}\.copied", r)
        }
        assert added == set(names) | {"corpora", "corpora/tiny"} | state
        assert len(state) <= 4
        # Each file was copied once, by whichever job took the lock first; the others waited for it.
        copied = [int(n) for _, _, err in results for n in re.findall(r"copied (\d+) file\(s\)", err)]
        assert sum(copied) == len(names), copied
        assert sum("waited " in err for _, _, err in results) >= 1
        print(f"\n[{shell.name}] {count} jobs seeding {len(names)} files at once: {took:.2f} s")
    finally:
        shutil.rmtree(box.root)


# --- hostile values: nothing written or deleted outside what the entrypoint manages ---------

SEGMENTS = [
    "a", "b c", "*", "?", "[x]", "-rf", "--", "\n", "..", ".", "$(touch pwned)", "`touch pwned`",
    "'", '"', "\\", "~", "tab\tbed", "victim", "x\ny", " ", "-",
]  # fmt: skip
VARIABLES = ("TMPDIR", "XDG_CACHE_HOME", "TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR", "NLTK_DATA", "HOME")


def plant(root: Path) -> None:
    """Files and directories that a split or globbed path would hit: none may change."""
    for name in ("victim", "a", "rf", "-rf", "pwned-not", "x", "y"):
        (root / "work" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "work" / name).write_bytes(b"do not touch")
    (root / "work" / "dir").mkdir()
    (root / "work" / "dir" / "victim").write_bytes(b"do not touch")


def resolve(value: str, cwd: Path) -> Path:
    """``value`` as a path, made absolute against ``cwd`` the way the consumers resolve it."""
    return Path(os.path.normpath(cwd / value)) if value else cwd


def allowed(rel: str, root: Path, env: dict[str, str], cwd: Path) -> bool:
    """Whether an added entry is inside a location, a job-local directory, or a directory that
    `mkdir -p` makes along a location's path as written (`a/../b` needs `a`, as the consumer's does),
    TMPDIR's among them: a missing one is made as the job's own `mkdir -p` would make it."""
    path = Path(os.path.normpath(root / rel))
    home = env.get("HOME") or str(root / "home")
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    written = [os.path.join(cwd, xdg, "s3tokenizer")]
    written += [os.path.join(cwd, env[var]) for var in (*EXPORT_VARS, "TMPDIR") if env.get(var)]
    tmp = resolve(env.get("TMPDIR") or "/tmp", cwd)
    if any(p.parent == tmp and p.name.startswith("bake-") for p in (path, *path.parents)):
        return True
    for place in written:
        normal = Path(os.path.normpath(place))
        parts = Path(place).parts
        along = {Path(os.path.normpath(os.path.join(*parts[:i]))) for i in range(1, len(parts) + 1)}
        if path == normal or normal in path.parents or path in along:
            return True
    return False


def value_for(root: str, segments: list[str], absolute: bool) -> str:
    """A variable's value from path segments: under the box's work directory, or relative."""
    path = "/".join(segments)
    return f"{root}/work/{path}" if absolute else path


HOSTILE = {
    "TMPDIR with a newline": {"TMPDIR": "{root}/tmp\n{root}/work/victim"},
    "TMPDIR with a newline, unset TIKTOKEN": {"TMPDIR": "{root}/tmp\n{root}/work/dir"},
    "XDG_CACHE_HOME with a newline": {"XDG_CACHE_HOME": "{root}/work/x\ny"},
    "glob characters": {"TIKTOKEN_RS_CACHE_DIR": "{root}/work/*", "XDG_CACHE_HOME": "{root}/work/[a-z]*"},
    "leading dashes, relative": {"TIKTOKEN_CACHE_DIR": "-rf", "TMPDIR": "--", "NLTK_DATA": "-"},
    "parent directories": {"TIKTOKEN_RS_CACHE_DIR": "../../work/a/../dir/cache", "XDG_CACHE_HOME": ".."},
    "command substitution": {"NLTK_DATA": "$(touch pwned)", "TMPDIR": "`touch pwned`"},
    "HOME relative with spaces": {"HOME": "my home", "XDG_CACHE_HOME": ""},
    "trailing slashes": {"TIKTOKEN_RS_CACHE_DIR": "{root}/work/cache//", "TMPDIR": "{root}/tmp/"},
}


@pytest.mark.parametrize("values", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_values_write_nothing_outside(shell: Shell, values: dict[str, str]) -> None:
    hostile_templates(shell, values)


def hostile_templates(shell: Shell, templates: dict[str, str]) -> None:
    """Run with ``templates`` ({root} replaced by the run's box) and check the whole box around it."""
    box = new_box(shell, baked(FILES))
    try:
        plant(box.root)
        values = {k: v.replace("{root}", str(box.root)) for k, v in templates.items()}
        cwd = box.root / "work" / "dir"
        before = snapshot(box.root, dir_mtimes=False)
        result = box.run("true", cwd=cwd, **values)
        assert result.returncode in (0, 6), result.stderr
        after = snapshot(box.root, dir_mtimes=False)
        for rel, entry in before.items():
            assert rel in after, f"{rel!r} was deleted"
            same = after[rel][:2] == entry[:2] and (entry[0] == "dir" or after[rel] == entry)
            assert same, f"{rel!r} was changed"
        env = box.env(**values)
        for rel in after:
            if rel not in before:
                assert allowed(rel, box.root, env, cwd), f"{rel!r} written outside the managed directories"
        assert not list(box.root.rglob("pwned"))
    finally:
        shutil.rmtree(box.root, ignore_errors=True)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.dictionaries(
        st.sampled_from(VARIABLES),
        st.tuples(st.lists(st.sampled_from(SEGMENTS), max_size=4), st.booleans()),
        max_size=4,
    )
)
def test_no_value_of_any_variable_writes_outside(
    shell: Shell, chosen: dict[str, tuple[list[str], bool]]
) -> None:
    hostile_templates(
        shell, {var: value_for("{root}", segs, absolute) for var, (segs, absolute) in chosen.items()}
    )


# --- SHA256SUMS: precise reasons -------------------------------------------------------


def rewrite_sums(box: Box, text: str) -> None:
    box.assets.chmod(0o755)
    (box.assets / "SHA256SUMS").chmod(0o644)
    (box.assets / "SHA256SUMS").write_text(text, newline="")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("crlf", "line 1 ends with a carriage return (CRLF line endings): expected LF line endings"),
        ("parent", "line 2 names '../outside', outside"),
        ("absolute", "line 2 names '/etc/passwd', outside"),
        ("garbage", "line 2 is not '<sha256>  <path>'"),
    ],
)
def test_sha256sums_damage_gets_a_precise_reason(box: Box, change: str, reason: str) -> None:
    text = (box.assets / "SHA256SUMS").read_text()
    first, rest = text.split("\n", 1)
    digest = "0" * 64
    if change == "crlf":
        text = text.replace("\n", "\r\n")
    elif change == "parent":
        text = f"{first}\n{digest}  ../outside\n{rest}"
    elif change == "absolute":
        text = f"{first}\n{digest}  /etc/passwd\n{rest}"
    else:
        text = f"{first}\nnot a checksum line\n{rest}"
    rewrite_sums(box, text)

    result = box.run("sh", "-c", f': > "{box.root}/job-ran"', BAKE_VERIFY=1)

    assert result.returncode == 3
    assert not (box.root / "job-ran").exists()
    assert f"bake: error: BAKE_VERIFY=1: {box.assets}/SHA256SUMS {reason}" in result.stderr
    assert len(result.stderr.splitlines()) == 1


# --- a node's first burst, in containers: twenty jobs at once on a fresh node volume ---------------

BURST = 20
# Each job checks every file where its consumer looks, byte for byte, and prints where that is.
BURST_JOB = r"""
set -e
for f in "$@"; do
    case $f in
    s3tokenizer/*) at=$XDG_CACHE_HOME/$f ;;
    tiktoken/*) at=$TIKTOKEN_RS_CACHE_DIR/${f#*/}; cmp "$TIKTOKEN_CACHE_DIR/${f#*/}" "/opt/bake/assets/$f" ;;
    nltk/*) at=$NLTK_DATA/${f#*/} ;;
    vllm_public_assets/*) at=$XDG_CACHE_HOME/vllm/assets/$f ;;
    esac
    cmp "$at" "/opt/bake/assets/$f"
done
echo "served at $XDG_CACHE_HOME $TIKTOKEN_RS_CACHE_DIR $TIKTOKEN_CACHE_DIR $NLTK_DATA"
"""
NODE_ENV = {
    "XDG_CACHE_HOME": "/node/xdg",
    "TIKTOKEN_RS_CACHE_DIR": "/node/rs",
    "TIKTOKEN_CACHE_DIR": "/node/rs",
    "NLTK_DATA": "/node/nltk",
    "BAKE_REQUIRE": "1",
}
# Bind mounts are node storage: another filesystem than the container's own `/`.
NODE_STATE = re.compile(
    r"^(xdg/s3tokenizer|xdg/vllm/assets/vllm_public_assets|rs|nltk)/\.bake(/lock|/served\.[0-9a-f]{64}\.copied)?$"
)


def burst_files() -> dict[str, tuple[str, int]]:
    """The image's baked files of the node's locations: asset path -> (name in /node, size)."""
    from tests.image import MANIFEST

    where = {
        "s3tokenizer": "xdg/s3tokenizer",
        "tiktoken": "rs",
        "nltk": "nltk",
        "vllm_public_assets": "xdg/vllm/assets/vllm_public_assets",  # under the same XDG_CACHE_HOME
    }
    return {
        a.path: (f"{where[a.path.split('/')[0]]}/{a.path.split('/', 1)[1]}", a.size or 0)
        for a in MANIFEST
        if a.path.split("/")[0] in where
    }


def watch_node(node: Path, sizes: dict[str, int], stop: threading.Event, seen: list[str]) -> None:
    """Until ``stop``: a file at a baked name under ``node`` of another size than the baked one is a
    partial, visible where a consumer looks."""
    while not stop.is_set():
        for rel, size in sizes.items():
            try:
                got = (node / rel).lstat().st_size
            except FileNotFoundError:
                continue
            if got != size:
                seen.append(f"{rel}: {got} of {size} bytes at the final name")


@pytest.mark.docker
@pytest.mark.timeout(600)
@pytest.mark.parametrize("round_", range(BURST))
def test_twenty_containers_at_once_on_a_fresh_node_volume(image: str, tmp_path: Path, round_: int) -> None:
    """Twenty jobs in containers start at once on a fresh node directory, BAKE_REQUIRE=1: none exits 6,
    each is served from node storage, each file is copied once, no partial is ever visible, and the
    node gains only verified copies and bake's hidden lock and stamps."""
    node, sync = tmp_path / "node", tmp_path / "sync"
    node.mkdir()
    sync.mkdir()
    node.chmod(0o755)
    sync.chmod(0o777)
    files = burst_files()
    sizes = dict(files.values())
    cmd = ["docker", "run", "--rm", "--network=none", "--entrypoint", "/bin/sh"]
    cmd += ["--mount", f"type=bind,src={node},dst=/node", "--mount", f"type=bind,src={sync},dst=/sync"]
    for key, value in NODE_ENV.items():
        cmd += ["--env", f"{key}={value}"]
    # Every job says it is up, then waits for one go, so that all start within a few milliseconds.
    script = (
        ': > "/sync/ready.$(hostname)"; while [ ! -e /sync/go ]; do sleep 0.02; done; '
        'exec tini -- bake-entrypoint /bin/sh -c "$0" job "$@"'
    )
    procs = [
        subprocess.Popen(
            [*cmd, image, "-c", script, BURST_JOB, *files],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(BURST)
    ]
    stop, partials = threading.Event(), []
    watcher = threading.Thread(target=watch_node, args=(node, sizes, stop, partials))
    watcher.start()
    try:
        deadline = time.monotonic() + 240
        while len(list(sync.glob("ready.*"))) < BURST and time.monotonic() < deadline:
            time.sleep(0.1)
        (sync / "go").touch()
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    finally:
        stop.set()
        watcher.join()

    assert partials == []
    for code, out, err in results:
        assert code == 0, err  # never 6: a job that finds a copy in progress waits for it
        assert out.strip() == "served at /node/xdg /node/rs /node/rs /node/nltk", err  # from node storage
    copied = [int(n) for _, _, err in results for n in re.findall(r"copied (\d+) file\(s\)", err)]
    assert sum(copied) == len(files), f"each file copied once on the node, saw copies of {copied}"
    for rel, kind in node_tree(node).items():
        if rel in sizes:
            assert kind == "file" and (node / rel).stat().st_size == sizes[rel], rel
        else:
            assert kind == "dir" or NODE_STATE.match(rel), (
                f"{rel}: neither a copy nor bake's hidden lock or stamp"
            )
    assert all((node / rel).is_file() for rel in sizes)


def node_tree(root: Path) -> dict[str, str]:
    """Every path under ``root``, relative, with its kind (file, dir, link or other), never followed."""
    out = {}
    for path in sorted(root.rglob("*")):
        kind = (
            "link" if path.is_symlink() else "dir" if path.is_dir() else "file" if path.is_file() else "other"
        )
        out[str(path.relative_to(root))] = kind
    return out

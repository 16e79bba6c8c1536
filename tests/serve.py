"""The entrypoint tests' harness: baked asset trees with their `bake.serve`, and a box to run it in.

`sealed` lays out an asset root the way the image build does: `bake fetch` (file:// sources)
then `bake seal`, which writes SHA256SUMS, bake.lock.json, the alias links and bake.serve for the
built-in consumers and the manifest's `[[consumer]]` tables. `sealed_hub` does the same for
pinned Hub repositories: the blobs are put in place as `bake fetch` would, then the index is
written and `bake seal` lays out the Hub's cache. Each distinct set is sealed once per session
and copied for every test.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.hub_server import git_blob_id
from tests.runners import bake

# --- a box to run the entrypoint in --------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "entrypoint.sh"
# Commands the script may run besides its shell's builtins, and bake (BAKE, below); the jobs use env,
# sh and cat, and the tests' own helpers awk, flock, sleep and the rest.
TOOLS = (
    "awk", "cat", "chmod", "cp", "date", "env", "find", "flock", "id", "ln", "mkdir", "mktemp", "mv",
    "rm", "sh", "sha256sum", "sleep", "stat", "sync", "touch", "true", "xargs",
)  # fmt: skip
# `bake` on a box's PATH, as an install puts it beside bake-entrypoint: this checkout's, run by the
# interpreter running the tests, or the system's for a job user who cannot run that one (the seeder
# needs only the standard library). A test that needs a node without bake removes it.
BAKE = f"""#!/bin/sh
PYTHONPATH='{REPO}'
export PYTHONPATH
for python in '{sys.executable}' /usr/bin/python3; do
	[ ! -x "$python" ] || exec "$python" -m bake "$@"
done
echo "bake: no python to run" >&2
exit 127
"""
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


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


def require(program: str) -> str:
    """The absolute path of ``program``; fails the test when it is not installed."""
    found = shutil.which(program)
    if found is None:
        pytest.fail(f"{program} is not installed; the entrypoint tests need it: apt-get install {program}")
    return found


def resolved(shell: Shell) -> Shell:
    """``shell`` with its program as an absolute path, since runs get a PATH of their own."""
    program, *rest = shell.argv
    return replace(shell, argv=(require(program), *rest))


def tool_dir(bin_dir: Path, shell: Shell, tools: tuple[str, ...] = TOOLS) -> None:
    """A PATH directory of only ``tools`` (from the shell's multi-call binary where it has one), and bake."""
    bin_dir.mkdir()
    (bin_dir / "bake").write_text(BAKE)
    (bin_dir / "bake").chmod(0o755)
    for tool in tools:
        if shell.tool and tool != "flock":
            source = require(shell.tool)
        else:
            # Debian's busybox has no flock applet (Alpine's has): util-linux's stands in for it.
            source = require("dash" if tool == "sh" else tool)
        (bin_dir / tool).symlink_to(source)


def content(seed: str, size: int) -> bytes:
    """``size`` deterministic bytes for the test asset ``seed``."""
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest()
    while len(out) < size:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:size])


# Lays out a baked asset root at the path it is given, and returns it.
AssetMaker = Callable[[Path], Path]
_TEMPLATES: dict[str, Path] = {}


def sealed(
    files: dict[str, bytes], urls: dict[str, str] | None = None, declared: dict[str, str] | None = None
) -> AssetMaker:
    """An asset root made by `bake fetch` and `bake seal` from ``files`` (asset path -> bytes).

    ``urls`` gives a file's canonical https URL where a naming rule needs one (a tiktoken file is
    named by its SHA-1); ``declared`` maps `[[consumer]]` names to their one location.
    """
    urls, declared = urls or {}, declared or {}
    key = hashlib.sha256(
        repr((sorted((p, hashlib.sha256(d).hexdigest()) for p, d in files.items()), urls, declared)).encode()
    ).hexdigest()

    def make(root: Path) -> Path:
        if key not in _TEMPLATES:
            _TEMPLATES[key] = _seal_template(files, urls, declared)
        shutil.copytree(_TEMPLATES[key], root, symlinks=True)
        return root

    return make


def sealed_hub(repo: str, commit: str, files: dict[str, bytes], *, whole: bool = True) -> AssetMaker:
    """An asset root holding one Hub repository pinned at ``commit``, sealed by `bake seal`.

    ``whole``: the entry names every file of the repository (a tree listing is written, and the
    snapshot is served whole); else an include pattern narrowed it.
    """
    key = hashlib.sha256(repr((repo, commit, sorted(files.items()), whole)).encode()).hexdigest()

    def make(root: Path) -> Path:
        if key not in _TEMPLATES:
            _TEMPLATES[key] = _seal_hub_template(repo, commit, files, whole)
        shutil.copytree(_TEMPLATES[key], root, symlinks=True)
        return root

    return make


def _seal_hub_template(repo: str, commit: str, files: dict[str, bytes], whole: bool) -> Path:
    from bake.index import write_index
    from bake.manifest import load_manifest

    work = Path(tempfile.mkdtemp(prefix="bake-sealed-hub-"))
    atexit.register(_remove, work)
    records = [
        f'  {{path = "{p}", size = {len(d)}, sha256 = "{hashlib.sha256(d).hexdigest()}", '
        f'blob = "{git_blob_id(d)}"}},'
        for p, d in sorted(files.items())
    ]
    include = "" if whole else 'include = ["*"]\n'
    text = f'[[hub]]\nrepo = "{repo}"\ncommit = "{commit}"\nref = "main"\n{include}files = [\n'
    (work / "assets.toml").write_text(text + "\n".join(records) + "\n]\n")
    dest = work / "assets"
    folder = "models--" + repo.replace("/", "--")
    for data in files.values():
        blob = dest / "hub" / folder / "blobs" / git_blob_id(data)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
    write_index(dest, load_manifest(work / "assets.toml"))
    done = bake("seal", "--manifest", str(work / "assets.toml"), "--dest", str(dest))
    assert done.returncode == 0, f"bake seal: {done.stderr}"
    return dest


def _seal_template(files: dict[str, bytes], urls: dict[str, str], declared: dict[str, str]) -> Path:
    work = Path(tempfile.mkdtemp(prefix="bake-sealed-"))
    atexit.register(_remove, work)
    lines = []
    for number, (path, data) in enumerate(sorted(files.items())):
        source = work / "sources" / str(number)
        source.parent.mkdir(exist_ok=True)
        source.write_bytes(data)
        sources = ", ".join(f'"{u}"' for u in [source.as_uri(), *([urls[path]] if path in urls else [])])
        lines += [
            "[[asset]]", f'name = "asset-{number}"', f'path = "{path}"', f"size = {len(data)}",
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"', f"urls = [{sources}]", "",
        ]  # fmt: skip
    for name, location in declared.items():
        lines += ["[[consumer]]", f'name = "{name}"', f'locations = ["{location}"]', ""]
    manifest = work / "assets.toml"
    manifest.write_text("\n".join(lines))
    dest = work / "assets"
    for step in (["fetch", "--cache-dir", str(work / "cache"), "-q"], ["seal"]):
        done = bake(step[0], "--manifest", str(manifest), "--dest", str(dest), *step[1:])
        assert done.returncode == 0, f"bake {step[0]}: {done.stderr}"
    return dest


def _remove(tree: Path) -> None:
    subprocess.run(["chmod", "-R", "u+w", str(tree)], check=False)
    shutil.rmtree(tree, ignore_errors=True)


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
        """Run the entrypoint with ARGS (as ``uid`` when given) and this box's environment plus ``env``."""
        prefix = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
        return subprocess.run(
            [*prefix, *self.argv(*args)],
            env=self.env(**env),
            cwd=cwd or self.root,
            capture_output=True,
            text=True,
            timeout=60,
        )


def new_box(shell: Shell, make_assets: AssetMaker) -> Box:
    """A box under /tmp (not pytest's tmp_path: its parents are 0700, and some cases run as another uid)."""
    root = Path(tempfile.mkdtemp(prefix="bake-entrypoint-"))
    root.chmod(0o755)
    tmp = root / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    home = root / "home"
    home.mkdir()
    tool_dir(root / "bin", shell)
    assets = make_assets(root / "assets")
    return Box(root, shell, assets, home, tmp, root / "bin")


def shell_and_box(
    make_assets: AssetMaker, mount: str | None = None
) -> tuple[Callable[..., Shell], Callable[..., Box]]:
    """The fixtures ``shell`` (each of SHELLS) and ``box`` (a new box on it, holding the tree
    ``make_assets`` lays out), for a test module to bind at its top:
    ``shell, box = shell_and_box(sealed(FILES, URLS), "volume")``. After each test the filesystem a
    case mounted at ``box.root/mount`` (where given) is unmounted (lazily) and the box removed."""

    @pytest.fixture(params=SHELLS, ids=lambda s: s.name)
    def shell(request: pytest.FixtureRequest) -> Shell:
        return resolved(request.param)

    @pytest.fixture
    def box(shell: Shell) -> Iterator[Box]:
        made = new_box(shell, make_assets)
        yield made
        if mount is not None:
            subprocess.run(["umount", "-l", str(made.root / mount)], capture_output=True, check=False)
        _remove(made.root)

    return shell, box


def job_env(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Parse the environment the job (``env``) printed."""
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


def snapshot(path: Path, dir_mtimes: bool = True) -> dict[str, tuple[object, ...]]:
    """Names, types, modes, mtimes, link targets and bytes of everything at and under ``path``."""
    out: dict[str, tuple[object, ...]] = {}

    def add(p: Path) -> None:
        st = p.lstat()
        rel = str(p.relative_to(path))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", st.st_mode, st.st_mtime_ns if dir_mtimes else None)
        else:
            out[rel] = ("file", st.st_mode, st.st_mtime_ns, p.read_bytes())

    add(path)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                add(Path(dirpath, name))
    return out


def ready_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("bake: assets ready")]

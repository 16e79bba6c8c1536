"""Hostile node storage, as root in a container, under dash and busybox sh: a link, a FIFO, a device,
a socket or a same-size impostor planted where bake makes its lock, partials and directories, or at a baked
name (issue 20, "node storage is never followed through a link, and never blocks").

Each case plants one thing in a bind-mounted node directory (node storage: another filesystem than
the container's `/`) and starts one job through the image's own entrypoint. Then:
- the start ends well within its timeout (a FIFO opened would hang it forever);
- nothing is created or changed outside the managed locations: the planted links point into a
  bind-mounted victim directory, compared before and after, and the job itself looks for anything
  new under /etc (where the defects of the last round wrote /etc/nologin and /etc/profile.d files);
- the job reads the baked bytes where its consumer looks, never the planted thing: a location that
  cannot be served in node storage is served job-local, with a warning naming what was in the way;
  a same-size impostor at a baked name is refused by BAKE_VERIFY=1 (exit 3) before the job starts.

The Hub's own names (.locks, blobs, snapshots, refs) come from a sealed Hub repository mounted as
BAKE_ASSETS; the others from the image's own assets.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bake import index, servefile
from bake.consumers import serve_records
from bake.seal import alias_links
from tests.hub_server import git_blob_id
from tests.image import ASSET_ROOT, MANIFEST, S3_ASSET, S3_NAME, tree_snapshot
from tests.serve import TOOLS, content, require, sealed_hub

pytestmark = pytest.mark.docker

HUB_COMMIT = hashlib.sha1(b"planted").hexdigest()
HUB_FILES = {"config.json": b'{"model_type": "tiny"}\n', "weights.bin": content("planted weights", 4096)}
HUB_REPO = "models--org--tiny"
HUB_BLOB = git_blob_id(HUB_FILES["weights.bin"])
S3_LOC = "xdg/s3tokenizer"  # ${XDG_CACHE_HOME}/s3tokenizer with XDG_CACHE_HOME=/job/xdg
# The name of the stamp that proves the image's s3tokenizer files served (its set's DIGEST).
S3_DIGEST = next(
    r.digest
    for r in serve_records(MANIFEST.consumers(), index.expected_files(MANIFEST), alias_links(MANIFEST))
    if isinstance(r, servefile.ServedSet) and r.consumer == "s3tokenizer"
)
HUB_LOC = "hf/hub"  # $HF_HOME/hub with HF_HOME=/job/hf

# A job that reports what its consumers would read, and anything new under /etc since it started.
JOB = r"""
s3=${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer/$1
hub=${HF_HUB_CACHE:-${HUGGINGFACE_HUB_CACHE:-${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}/hub}}
if [ -n "$2" ]; then cmp "$s3" "$2" && echo s3-served; fi
if [ -n "$3" ]; then cmp "$hub/$3" "$4" && echo hub-served; fi
find /etc -newer /tmp/started | sed 's/^/new: /'
echo done
"""


@dataclass(frozen=True)
class Case:
    where: str  # "s3" (the image's assets) or "hub" (a sealed Hub repository)
    plant: Callable[[Path], None]  # lays the hostile thing out in the node directory (mounted at /job)
    verify: bool = False
    named: str = ""  # what the warning must call the planted thing, where a case checks it


def link(rel: str, target: str) -> Callable[[Path], None]:
    def plant(node: Path) -> None:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        (node / rel).symlink_to(target)

    return plant


def fifo(rel: str) -> Callable[[Path], None]:
    def plant(node: Path) -> None:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(node / rel)

    return plant


def device(rel: str) -> Callable[[Path], None]:
    def plant(node: Path) -> None:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node / rel, 0o600 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's

    return plant


def unix_socket(rel: str) -> Callable[[Path], None]:
    def plant(node: Path) -> None:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        here = os.getcwd()
        os.chdir((node / rel).parent)  # bound by its name: a socket's path may hold 107 bytes at most
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind((node / rel).name)  # the socket file stays after the close
        finally:
            os.chdir(here)

    return plant


def impostor(rel: str, size: int) -> Callable[[Path], None]:
    def plant(node: Path) -> None:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        (node / rel).write_bytes(b"\xff" * size)

    return plant


def both(*plants: Callable[[Path], None]) -> Callable[[Path], None]:
    def plant(node: Path) -> None:
        for one in plants:
            one(node)

    return plant


BLOB = f"{HUB_LOC}/{HUB_REPO}/blobs/{HUB_BLOB}"
CASES = {
    "state dir links to a victim": Case("s3", link(f"{S3_LOC}/.bake", "/victim/dir")),
    "state dir links to /etc": Case("s3", link(f"{S3_LOC}/.bake", "/etc")),
    "state dir is a FIFO": Case("s3", fifo(f"{S3_LOC}/.bake")),
    "lock links to /etc/nologin": Case("s3", link(f"{S3_LOC}/.bake/lock", "/etc/nologin")),
    "lock links to a victim file": Case("s3", link(f"{S3_LOC}/.bake/lock", "/victim/file")),
    "lock is a FIFO": Case("s3", fifo(f"{S3_LOC}/.bake/lock")),
    "lock is a device": Case("s3", device(f"{S3_LOC}/.bake/lock")),
    "lock is a socket": Case("s3", unix_socket(f"{S3_LOC}/.bake/lock"), named="is a socket"),
    "state dir is a socket": Case("s3", unix_socket(f"{S3_LOC}/.bake"), named="is a socket"),
    "a stale partial links to a victim": Case(
        "s3", both(fifo(f"{S3_LOC}/.bake/lock.x"), link(f"{S3_LOC}/.bake/partial.AbC123", "/victim/dir"))
    ),
    "stamp links to a victim": Case("s3", link(f"{S3_LOC}/.bake/served.{S3_DIGEST}.copied", "/victim/file")),
    "baked name links to a same-size file": Case("s3", link(f"{S3_LOC}/{S3_NAME}", "/victim/same-size")),
    "baked name is a FIFO": Case("s3", fifo(f"{S3_LOC}/{S3_NAME}")),
    "baked name is a device": Case("s3", device(f"{S3_LOC}/{S3_NAME}")),
    "baked name holds a same-size impostor": Case(
        "s3", impostor(f"{S3_LOC}/{S3_NAME}", S3_ASSET.size or 0), verify=True
    ),
    ".locks links to a victim": Case("hub", link(f"{HUB_LOC}/.locks", "/victim/dir")),
    ".locks/.bake links to /etc/profile.d": Case("hub", link(f"{HUB_LOC}/.locks/.bake", "/etc/profile.d")),
    "the Hub lock is a FIFO": Case("hub", fifo(f"{HUB_LOC}/.locks/.bake/lock")),
    "blobs links to a victim": Case("hub", link(f"{HUB_LOC}/{HUB_REPO}/blobs", "/victim/dir")),
    "snapshots links to a victim": Case("hub", link(f"{HUB_LOC}/{HUB_REPO}/snapshots", "/victim/dir")),
    "refs links to /etc": Case("hub", link(f"{HUB_LOC}/{HUB_REPO}/refs", "/etc")),
    "a blob is a FIFO": Case("hub", fifo(BLOB)),
    "a blob links to a same-size file": Case("hub", link(BLOB, "/victim/same-size-blob")),
}


@pytest.fixture(scope="module")
def hub_assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hub repository pinned and sealed, to mount as BAKE_ASSETS."""
    return sealed_hub("org/tiny", HUB_COMMIT, HUB_FILES)(tmp_path_factory.mktemp("hub") / "assets")


@pytest.fixture(scope="module")
def busybox_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PATH of busybox applets, as links to /bb/busybox where the container mounts it (flock:
    the image's util-linux one, which Debian's busybox lacks)."""
    require("busybox")
    bin_dir = tmp_path_factory.mktemp("busybox-bin")
    for tool in (*TOOLS, "cmp", "sed"):  # and what the job and its start marker use
        (bin_dir / tool).symlink_to("/usr/bin/flock" if tool == "flock" else "/bb/busybox")
    return bin_dir


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[Path]:
    """What planted links point at: a directory and files that must not change."""
    root = tmp_path / "victim"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "kept").write_bytes(b"do not touch")
    (root / "file").write_bytes(b"do not touch")
    (root / "same-size").write_bytes(b"\0" * (S3_ASSET.size or 0))
    (root / "same-size-blob").write_bytes(b"\0" * len(HUB_FILES["weights.bin"]))
    root.chmod(0o755)
    yield root


def start(
    image: str, shell: str, case: Case, node: Path, victim: Path, hub: Path, busybox_bin: Path
) -> subprocess.CompletedProcess[str]:
    """One job through the image's entrypoint, under ``shell``, with the node directory at /job."""
    env = {"XDG_CACHE_HOME": "/job/xdg", "HF_HOME": "/job/hf", "BAKE_REQUIRE": "1"}
    mounts = {node: "/job", victim: "/victim"}
    args = ("", "", "", "")
    if case.where == "hub":
        env["BAKE_ASSETS"] = "/hubassets"
        mounts[hub] = "/hubassets"
        snap = f"{HUB_REPO}/snapshots/{HUB_COMMIT}/weights.bin"
        args = (S3_NAME, "", snap, f"/hubassets/hub/{snap}")
    else:
        args = (S3_NAME, f"{ASSET_ROOT}/{S3_ASSET.path}", "", "")
    if case.verify:
        env["BAKE_VERIFY"] = "1"
    entry = "bake-entrypoint"
    if shell == "busybox":
        mounts[require("busybox")] = "/bb/busybox"
        mounts[busybox_bin] = "/bbin"
        env["PATH"] = "/bbin"
        entry = "/bb/busybox sh /usr/local/bin/bake-entrypoint"
    else:
        entry = "dash /usr/local/bin/bake-entrypoint"
    cmd = ["docker", "run", "--rm", "--network=none", "--entrypoint", "/bin/sh"]
    for src, dst in mounts.items():
        cmd += ["--mount", f"type=bind,src={src},dst={dst}"]
    for key, value in env.items():
        cmd += ["--env", f"{key}={value}"]
    # The start marker first, then the entrypoint under the shell, then the job under the image's sh.
    script = f'touch /tmp/started; exec {entry} /bin/sh -c "$0" job "$@"'
    return subprocess.run(
        [*cmd, image, "-c", script, JOB, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("shell", ["dash", "busybox"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_planted_thing_is_never_followed_or_opened_and_never_served(
    image: str, tmp_path: Path, victim: Path, hub_assets: Path, busybox_bin: Path, shell: str, name: str
) -> None:
    case = CASES[name]
    node = tmp_path / "node"
    node.mkdir()
    node.chmod(0o755)
    (node / "someone else's.bin").write_bytes(b"node data")
    case.plant(node)
    victim_before = tree_snapshot(victim)

    proc = start(image, shell, case, node, victim, hub_assets, busybox_bin)

    assert tree_snapshot(victim) == victim_before, "something was written through a planted link"
    if case.verify:
        assert proc.returncode == 3, proc.stderr
        assert f"/job/{S3_LOC}/{S3_NAME}: expected the baked file's sha256" in proc.stderr
        assert "done" not in proc.stdout
        return
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "done" and not [line for line in lines if line.startswith("new: ")], proc.stdout
    served = "hub-served" if case.where == "hub" else "s3-served"
    assert served in lines, f"the job did not read the baked bytes: {proc.stderr}"
    assert case.named in proc.stderr, proc.stderr
    assert (node / "someone else's.bin").read_bytes() == b"node data"


def test_the_busybox_applets_are_busybox(busybox_bin: Path) -> None:
    assert os.readlink(busybox_bin / "sh") == "/bb/busybox" and shutil.which("busybox")

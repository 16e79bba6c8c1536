"""A Hub endpoint that lies, through the real CLI: nothing is written outside, every answer is checked first.

The loopback Hub (tests/hub_server.py) answers with the commit ids, ETags, paths, sizes and listings
each test chooses. ``bake add hf://`` and ``bake fetch`` (with either downloader) must refuse them with
exit 3 naming the repository and the field, before anything is downloaded or written, and must never
read, move or write a file outside the cache, the manifest and ``--dest``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub_server import LoopbackHub

from . import MIB, SUMMARY, bake, bake_command, cli_env, error_text, files_under

CONFIG = b'{"hidden_size": 8}\n'
WEIGHTS = hashlib.sha256(b"hostile").digest() * 2048  # 64 KiB, an LFS file


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackHub]:
    with LoopbackHub(tmp_path_factory.mktemp("hostile-hub")) as server:
        yield server


@pytest.fixture
def env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """tests/conftest.py's, with temporary directories inside tmp_path too: a climb out of one lands
    there, not in /."""
    (tmp_path / "tmp").mkdir()
    return {"TMPDIR": str(tmp_path / "tmp"), **env}


def new_repo(hub: LoopbackHub, request: pytest.FixtureRequest, files: dict | None = None) -> tuple[str, str]:
    """A repository of this test's own (the Hub lives for the module): returns (repo, commit)."""
    repo = "org/" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]
    files = files or {"config.json": CONFIG, "tok/vocab.txt": b"a\nb\n", "w.bin": (WEIGHTS, True)}
    return repo, hub.commit(repo, files)


def snapshot(root: Path) -> set[str]:
    return set(files_under(root))


def resolves(hub: LoopbackHub, repo: str) -> int:
    """File requests (resolve and CDN) the Hub has answered for ``repo`` so far."""
    stats = hub.stats()
    return sum(v for k, v in stats.items() if f"/{repo}/resolve/" in k or k.startswith("cdn GET"))


def outside(tmp_path: Path) -> Path:
    """A directory beside the test's cache: nothing may ever appear here."""
    path = tmp_path / "outside"
    path.mkdir(exist_ok=True)
    return path


# (hostile answers, the field the message must name). Paths climb from a file's place in a
# huggingface_hub cache (blobs/, snapshots/<commit>/) to tmp_path/outside. Every such cache sits at
# least four levels under tmp_path (TMPDIR and the cache are inside it), so no climb leaves tmp_path.
UP = "../" * 4
ADD_CASES = {
    "etag-climbs-out": ({"etag": f"{UP}outside/escaped"}, "ETag"),
    "commit-climbs-out": ({"commit": f"{UP}outside/c"}, "commit"),
    "negative-size": ({"size": -5}, "size"),
    "size-not-a-number": ({"size": "12"}, "size"),
    "blob-id-not-hex": ({"blob": "zz"}, "blob"),
    "lfs-sha256-not-hex": ({"lfs_sha256": "../x"}, "sha256"),
    "listing-loops": ({"listing": "loop"}, "listing"),
    "listing-never-ends": ({"listing": "endless"}, "listing"),
    "listing-page-too-big": ({"pad": 80 * MIB}, "listing"),
}


@pytest.mark.parametrize("case", list(ADD_CASES))
def test_add_refuses_a_hostile_answer_before_writing_or_downloading(
    hub: LoopbackHub, env: dict, tmp_path: Path, request: pytest.FixtureRequest, case: str
) -> None:
    answers, field = ADD_CASES[case]
    repo, _ = new_repo(hub, request)
    hub.hostile(repo, page_size=2, **answers)
    out = outside(tmp_path)
    manifest = tmp_path / "assets.toml"
    before = snapshot(tmp_path)
    downloads = resolves(hub, repo)
    proc = bake("add", f"hf://{repo}", "--manifest", manifest, "--timeout", "5", "--deadline", "60", env=env)
    errors = error_text(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert repo in errors and field in errors, errors
    assert "Traceback" not in proc.stderr
    assert files_under(out) == [] and not manifest.exists()
    made = snapshot(tmp_path) - before
    assert not [p for p in made if not p.startswith("xdg/bake/")], f"written outside: {made}"
    if case not in ("etag-climbs-out",):  # the ETag is an answer about one file: it is asked for first
        assert resolves(hub, repo) == downloads, "a file was downloaded before the listing was checked"


def pin(hub: LoopbackHub, env: dict, tmp_path: Path, repo: str, downloader: str) -> Path:
    """``bake add`` the (still honest) repository; returns the manifest, set to ``downloader``."""
    manifest = tmp_path / "assets.toml"
    proc = bake("add", f"hf://{repo}", "--manifest", manifest, env=env)
    assert proc.returncode == 0, proc.stderr
    if downloader != "bake":
        manifest.write_text(
            manifest.read_text().replace('commit = "', f'downloader = "{downloader}"\ncommit = "')
        )
    return manifest


def fetch(manifest: Path, tmp_path: Path, env: dict, *args: str) -> subprocess.CompletedProcess[str]:
    dest, cache = tmp_path / "dest", tmp_path / "cache"
    return bake("fetch", "--manifest", manifest, "--dest", dest, "--cache-dir", cache, *args, env=env)


def test_the_huggingface_hub_downloader_never_touches_a_file_outside(
    hub: LoopbackHub, env: dict, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The ETag names a user's file holding the very bytes pinned: it stays, and no lock appears beside it."""
    repo, _ = new_repo(hub, request)
    manifest = pin(hub, env, tmp_path, repo, "huggingface_hub")
    users = tmp_path / "home"
    users.mkdir()
    (users / "weights").write_bytes(WEIGHTS)
    # From <cache>/<staging>/models--org--x/blobs/, as far up as any layout needs, then down again.
    climb = "../" * 4 + "home/weights"
    hub.hostile(repo, etag=climb)
    before = snapshot(tmp_path)
    proc = fetch(manifest, tmp_path, env)
    errors = error_text(proc.stderr)
    assert (users / "weights").read_bytes() == WEIGHTS, "the user's file must stay where it is"
    assert proc.returncode == 3, proc.stderr
    assert repo in errors and "ETag" in errors, errors
    made = snapshot(tmp_path) - before
    assert not [p for p in made if not p.startswith(("cache/", "dest/"))], f"written outside: {made}"


@pytest.mark.parametrize("downloader", ["bake", "huggingface_hub"])
def test_every_path_of_a_shared_blob_is_checked_at_the_origin(
    hub: LoopbackHub, env: dict, tmp_path: Path, request: pytest.FixtureRequest, downloader: str
) -> None:
    repo, commit = new_repo(hub, request, {"a.json": CONFIG, "b/same.json": CONFIG})
    manifest = pin(hub, env, tmp_path, repo, downloader)
    hub.replace(repo, commit, "b/same.json", b'{"changed": true}\n')
    proc = fetch(manifest, tmp_path, env)
    errors = error_text(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert "b/same.json" in errors, errors
    assert files_under(tmp_path / "dest") == []


def test_the_huggingface_hub_downloader_keeps_the_deadline(
    hub: LoopbackHub, env: dict, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A body that stalls after its headers: exit 3 at the deadline, whole process timed."""
    repo, _ = new_repo(hub, request, {"config.json": CONFIG})
    manifest = pin(hub, env, tmp_path, repo, "huggingface_hub")
    hub.hostile(repo, stall=30)
    t0 = time.monotonic()
    proc = fetch(manifest, tmp_path, env, "--timeout", "1", "--deadline", "3")
    seconds = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    assert "deadline" in error_text(proc.stderr) or "no data" in error_text(proc.stderr), proc.stderr
    assert seconds < 3 + 2.0, f"took {seconds:.1f} s against a 3 s deadline and a 1 s stall timeout"
    request.config.stash.setdefault(SUMMARY, []).append(
        f"huggingface_hub downloader, body stalled: exit 3 after {seconds:.1f} s (--deadline 3, --timeout 1)"
    )


def test_the_huggingface_hub_downloader_takes_a_mirror_first(
    hub: LoopbackHub, env: dict, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    repo, commit = new_repo(hub, request, {"config.json": CONFIG, "w.bin": (WEIGHTS, True)})
    manifest = pin(hub, env, tmp_path, repo, "huggingface_hub")
    copy = tmp_path / "mirror"
    copy.mkdir()
    (copy / "config.json").write_bytes(CONFIG)
    (copy / "w.bin").write_bytes(WEIGHTS)
    downloads = resolves(hub, repo)
    proc = fetch(manifest, tmp_path, env, "--mirror", f"hf://{repo}@{commit}/=file://{copy}/")
    assert proc.returncode == 0, proc.stderr
    assert resolves(hub, repo) == downloads, "the mirror serves every file; the Hub serves none"


def test_prune_reclaims_the_staging_of_a_killed_huggingface_hub_download(
    hub: LoopbackHub, env: dict, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    repo, _ = new_repo(hub, request, {"config.json": CONFIG})
    manifest = pin(hub, env, tmp_path, repo, "huggingface_hub")
    hub.hostile(repo, stall=60)
    cache = tmp_path / "cache"
    args = (
        "fetch",
        "--manifest",
        manifest,
        "--dest",
        tmp_path / "dest",
        "--cache-dir",
        cache,
        "--timeout",
        "50",
    )
    proc = subprocess.Popen(bake_command(*args), env=cli_env(env), stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + 30
        while not staging(cache) and time.monotonic() < give_up:
            time.sleep(0.05)
        assert staging(cache), "the download never started"
        time.sleep(0.5)  # huggingface_hub is inside the stalled body now
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    pruned = bake("cache", "prune", "--cache-dir", cache)
    assert pruned.returncode == 0, pruned.stderr
    assert staging(cache) == [], "the killed download's staging outlived prune"


def staging(cache: Path) -> list[str]:
    """What a download in progress holds in the cache, beyond its layout and lock files."""
    return [p for p in files_under(cache) if not p.startswith(("locks/", "objects/"))] + [
        p.name for p in cache.glob("*") if p.is_dir() and p.name not in ("locks", "objects", "partial")
    ]

"""The download cache: its location, progress files, cross-process locks and prune."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bake.cache import Cache, PartialState, default_cache_dir, prune

REPO = Path(__file__).resolve().parents[1]
SHA_A = hashlib.sha256(b"a").hexdigest()
SHA_B = hashlib.sha256(b"b").hexdigest()
DAY = 86400


@pytest.mark.parametrize(
    ("xdg", "expected"),
    [
        pytest.param("/var/cache/ci", "/var/cache/ci/bake", id="xdg-set"),
        pytest.param("", "{home}/.cache/bake", id="xdg-empty"),
        pytest.param(None, "{home}/.cache/bake", id="xdg-unset"),
        pytest.param("rel/cache", "{cwd}/rel/cache/bake", id="xdg-relative"),
    ],
)
def test_default_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg: str | None, expected: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert default_cache_dir() == Path(expected.format(home=tmp_path / "home", cwd=tmp_path))


def test_state_round_trip(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    state = PartialState(size=100, url="https://x/f", etag='"abc"', done=[(0, 10), (50, 60)])
    cache.save_state(SHA_A, state)
    assert cache.load_state(SHA_A) == state
    assert [p.name for p in (tmp_path / "partial").iterdir()] == [f"{SHA_A}.json"]  # no temporaries left


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("not json", id="garbage"),
        pytest.param('{"version": 99, "size": 1, "done": []}', id="other-version"),
        pytest.param('{"version": 1, "size": 10, "done": [[0, 20]]}', id="range-past-size"),
        pytest.param('{"version": 1, "size": 10, "done": [[5, 5]]}', id="empty-range"),
        pytest.param('{"version": 1, "size": -1, "done": []}', id="negative-size"),
        pytest.param('{"version": 1}', id="missing-keys"),
    ],
)
def test_unusable_state_reads_as_none(tmp_path: Path, content: str) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    cache.state_path(SHA_A).write_text(content)
    assert cache.load_state(SHA_A) is None


def test_commit_moves_partial_to_objects(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    cache.partial_path(SHA_A).write_bytes(b"a")
    cache.save_state(SHA_A, PartialState(size=1, done=[(0, 1)]))
    assert cache.commit(SHA_A).read_bytes() == b"a"
    assert list((tmp_path / "partial").iterdir()) == []


def test_unwritable_cache_dir_is_a_fetch_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(Exception, match="--cache-dir"):
        Cache(tmp_path / "file" / "cache").ensure()


HOLD = """
import sys, time
from pathlib import Path
from bake.cache import Cache
cache = Cache(Path(sys.argv[1]))
with cache.lock(sys.argv[2], shared=sys.argv[3] == "shared"):
    print("locked", flush=True)
    time.sleep(float(sys.argv[4]))
"""


def hold_lock(cache_dir: Path, sha: str, mode: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cache_dir), sha, mode, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.parametrize(
    ("held", "wanted", "blocks"),
    [
        pytest.param("exclusive", False, True, id="exclusive-blocks-shared"),
        pytest.param("exclusive", True, True, id="exclusive-blocks-exclusive"),
        pytest.param("shared", False, False, id="shared-admits-shared"),
        pytest.param("shared", True, True, id="shared-blocks-exclusive"),
    ],
)
def test_locks_across_processes(tmp_path: Path, held: str, wanted: bool, blocks: bool) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    proc = hold_lock(tmp_path, SHA_A, held, 0.6)
    waits: list[float] = []
    started = time.monotonic()
    with cache.lock(SHA_A, shared=not wanted, wait=lambda s: (waits.append(s), time.sleep(s))):
        elapsed = time.monotonic() - started
    proc.wait()
    assert bool(waits) == blocks
    assert (elapsed >= 0.3) == blocks


def test_lock_without_wait_raises_when_busy(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    proc = hold_lock(tmp_path, SHA_A, "exclusive", 0.5)
    with pytest.raises(BlockingIOError), cache.lock(SHA_A):
        pass
    proc.wait()


def make_entry(cache: Cache, sha: str, *, obj: bool = False, partial_age_days: float | None = None) -> None:
    if obj:
        cache.object_path(sha).write_bytes(b"object")
    if partial_age_days is not None:
        cache.partial_path(sha).write_bytes(b"part")
        cache.save_state(sha, PartialState(size=4, done=[(0, 2)]))
        when = time.time() - partial_age_days * DAY
        for path in (cache.partial_path(sha), cache.state_path(sha)):
            os.utime(path, (when, when))


@pytest.mark.parametrize(
    ("keep", "partial_age", "object_left", "partial_left"),
    [
        pytest.param(None, 10, True, False, id="keep-all-old-partial-removed"),
        pytest.param(None, 1, True, True, id="keep-all-young-partial-kept"),
        pytest.param(set(), 1, False, True, id="unnamed-object-removed"),
        pytest.param({SHA_A}, 10, True, False, id="named-object-kept"),
    ],
)
def test_prune(
    tmp_path: Path, keep: set | None, partial_age: float, object_left: bool, partial_left: bool
) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    make_entry(cache, SHA_A, obj=True, partial_age_days=partial_age)
    sizes = {  # the disk each file holds: what prune gives back
        p: p.stat().st_blocks * 512
        for p in (cache.object_path(SHA_A), cache.partial_path(SHA_A), cache.state_path(SHA_A))
    }
    result = prune(tmp_path, keep, max_age_days=7)
    assert cache.object_path(SHA_A).exists() == object_left
    assert cache.partial_path(SHA_A).exists() == partial_left
    assert cache.state_path(SHA_A).exists() == partial_left
    gone = {p for p in sizes if not p.exists()}
    assert set(result.removed) == gone
    assert result.bytes_freed == sum(sizes[p] for p in gone)
    assert result.objects_kept == int(object_left)


@pytest.mark.parametrize(
    ("record", "staging", "left"),
    [
        pytest.param(PartialState(size=4, done=[(0, 2)]), False, True, id="known-size-kept"),
        pytest.param(PartialState(size=None, done=[(0, 2)]), False, False, id="unknown-size-reclaimed"),
        pytest.param(
            PartialState(size=None, etag='"e"', done=[(0, 2)]), False, False, id="unknown-with-etag"
        ),
        pytest.param(None, False, False, id="no-record-reclaimed"),
        pytest.param(PartialState(size=4, done=[(0, 2)]), True, True, id="staging-reclaimed"),
    ],
)
def test_prune_reclaims_young_partials_no_fetch_could_resume(
    tmp_path: Path, record: PartialState | None, staging: bool, left: bool
) -> None:
    """Unknown size, no record, a huggingface_hub staging: nobody holds the lock, so they go at any age."""
    cache = Cache(tmp_path)
    cache.ensure()
    cache.partial_path(SHA_A).write_bytes(b"part")
    if record is not None:
        cache.save_state(SHA_A, record)
    if staging:
        (cache.staging_dir(SHA_A) / "blobs").mkdir(parents=True)
        (cache.staging_dir(SHA_A) / "blobs" / "x.incomplete").write_bytes(b"x" * 8192)
    result = prune(tmp_path, None, max_age_days=7)
    assert cache.partial_path(SHA_A).exists() == left
    assert not cache.staging_dir(SHA_A).exists()
    assert result.bytes_freed >= (8192 if staging else 0) + (0 if left else 4)


def test_commit_names_an_object_by_the_digest_it_was_hashed_to(tmp_path: Path) -> None:
    """bake add learns a file's sha256: the partial keyed by its URL goes in under that digest."""
    cache = Cache(tmp_path)
    cache.ensure()
    cache.partial_path(SHA_B).write_bytes(b"a")
    cache.save_state(SHA_B, PartialState(size=1, done=[(0, 1)]))
    assert cache.commit(SHA_B, SHA_A) == cache.object_path(SHA_A)
    assert cache.object_path(SHA_A).read_bytes() == b"a" and list((tmp_path / "partial").iterdir()) == []


def test_prune_skips_entries_in_use(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    make_entry(cache, SHA_A, obj=True)
    make_entry(cache, SHA_B, obj=True)
    proc = hold_lock(tmp_path, SHA_A, "shared", 1.0)
    result = prune(tmp_path, set(), max_age_days=7)
    proc.wait()
    assert cache.object_path(SHA_A).exists()
    assert not cache.object_path(SHA_B).exists()
    assert result.busy == (SHA_A,)
    assert "in use" in str(result)


def test_prune_drops_lock_files_of_removed_entries(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    make_entry(cache, SHA_A, obj=True)
    with cache.lock(SHA_A):
        pass
    prune(tmp_path, set(), max_age_days=7)
    assert list((tmp_path / "locks").iterdir()) == []
    with cache.lock(SHA_A):  # a later fetch simply makes a new one
        assert cache.lock_path(SHA_A).exists()


def test_prune_of_a_missing_cache_is_empty(tmp_path: Path) -> None:
    result = prune(tmp_path / "nothing", None, 7)
    assert (result.removed, result.bytes_freed, result.busy) == ((), 0, ())


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_prune_dry_run_lists_what_prune_removes_and_removes_nothing(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.ensure()
    make_entry(cache, SHA_A, obj=True, partial_age_days=10)  # an object no manifest names, an old partial
    make_entry(cache, SHA_B, obj=True)
    before = _tree(tmp_path)
    dry = prune(tmp_path, {SHA_B}, max_age_days=7, dry_run=True)
    assert _tree(tmp_path) == before
    assert "would remove 3 file(s)" in str(dry), dry
    real = prune(tmp_path, {SHA_B}, max_age_days=7)
    assert (set(dry.removed), dry.bytes_freed) == (set(real.removed), real.bytes_freed)


def test_bake_cache_prune_lists_each_file_it_removes(tmp_path: Path) -> None:
    from tests.runners import bake

    cache = Cache(tmp_path)
    cache.ensure()
    make_entry(cache, SHA_B, partial_age_days=3)
    dry = bake("cache", "prune", "--cache-dir", tmp_path, "--max-age", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would remove {cache.partial_path(SHA_B)}" in dry.stdout.splitlines(), dry.stdout
    assert cache.partial_path(SHA_B).exists()
    real = bake("cache", "prune", "--cache-dir", tmp_path, "--max-age", "1")
    assert f"removed {cache.partial_path(SHA_B)}" in real.stdout.splitlines(), real.stdout
    assert not cache.partial_path(SHA_B).exists()

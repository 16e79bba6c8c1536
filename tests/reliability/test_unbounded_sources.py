"""Sources that never end, on a filesystem of the test's own: the disk a size-less download takes is bounded.

An asset without a ``size`` read from ``file:///dev/zero``, or from a loopback server that streams
forever, stops at ``--max-size`` or before the free space of its filesystem falls under
``--min-free``: exit 3 naming the asset, the bound and how to raise it, with nothing left behind.
Everything runs on a 256 MiB tmpfs, never on the machine's own disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mirror import Mirror, http_error, truncate

from . import MIB, SUMMARY, bake, blob, error_text, files_under, manifest_text, sha256

FS_SIZE = 256 * MIB
# A name whose sha256 nothing will ever match: the bytes of a source without end.
NEVER = "e" * 64
DATA = blob(2 * MIB + 3, "unbounded")


@pytest.fixture(scope="module")
def server() -> Iterator[Mirror]:
    with Mirror() as m:
        m.add_endless("/endless.bin")
        yield m


def source_url(kind: str, server: Mirror) -> str:
    return "file:///dev/zero" if kind == "dev-zero" else server.url("/endless.bin")


def used(fs: Path) -> int:
    st = os.statvfs(fs)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def record(request: pytest.FixtureRequest, line: str) -> None:
    request.config.stash.setdefault(SUMMARY, []).append(line)


@pytest.mark.parametrize("kind", ["dev-zero", "endless-server"])
@pytest.mark.parametrize(
    ("bound", "args"),
    [("--max-size", ("--max-size", "64M", "--min-free", "0")), ("--min-free", ("--min-free", "64M"))],
)
def test_an_endless_source_stops_at_its_bound_and_leaves_nothing(
    tmpfs: Callable[..., Path],
    server: Mirror,
    request: pytest.FixtureRequest,
    kind: str,
    bound: str,
    args: tuple[str, ...],
) -> None:
    fs = tmpfs("fs", FS_SIZE)
    manifest = fs.parent / "assets.toml"
    entry = {"name": "endless", "path": "e/endless.bin", "sha256": NEVER, "urls": [source_url(kind, server)]}
    manifest.write_text(manifest_text([entry]))
    (fs / "dest").mkdir()
    before = used(fs)
    t0 = time.monotonic()
    proc = bake(
        "fetch", "--manifest", manifest, "--dest", fs / "dest", "--cache-dir", fs / "cache",
        "--timeout", "5", "--attempts", "2", *args,
    )  # fmt: skip
    seconds = time.monotonic() - t0
    errors = error_text(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert "asset 'endless'" in errors and bound in errors and "64 MiB" in errors, errors
    assert "Traceback" not in proc.stderr
    assert files_under(fs / "dest") == [] and list((fs / "dest").iterdir()) == []
    assert [p for p in files_under(fs / "cache") if not p.startswith("locks/")] == []
    assert used(fs) - before < MIB, "the bytes of the stopped download were given back"
    record(
        request, f"endless {kind}, {bound} 64M on a 256 MiB tmpfs: exit 3 in {seconds:.1f} s, 0 bytes left"
    )


@pytest.mark.parametrize("kind", ["dev-zero", "endless-server"])
def test_add_of_an_endless_source_stops_at_max_size(
    tmpfs: Callable[..., Path], server: Mirror, kind: str
) -> None:
    fs = tmpfs("fs", FS_SIZE)
    manifest = fs.parent / "assets.toml"
    text = manifest_text([{"name": "other", "path": "o/x", "sha256": NEVER, "urls": ["file:///nowhere"]}])
    manifest.write_text(text)
    proc = bake(
        "add", source_url(kind, server), "--path", "data/endless.bin", "--manifest", manifest,
        "--cache-dir", fs / "cache", "--timeout", "5", "--max-size", "32M", "--min-free", "0",
    )  # fmt: skip
    errors = error_text(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert "--max-size" in errors and "32 MiB" in errors, errors
    assert manifest.read_text() == text
    assert [p for p in files_under(fs / "cache") if not p.startswith("locks/")] == []


def test_a_failed_sizeless_partial_without_a_validator_is_removed(tmp_path: Path) -> None:
    """Nothing identifies the version its bytes came from, so nothing could resume it safely."""
    with Mirror({"/plain.bin": DATA}, etag=False) as plain:
        plain.script("/plain.bin", truncate(MIB), http_error(404))
        entry = {
            "name": "plain",
            "path": "p/plain.bin",
            "sha256": sha256(DATA),
            "urls": [plain.url("/plain.bin")],
        }
        manifest = tmp_path / "assets.toml"
        manifest.write_text(manifest_text([entry]))
        proc = bake(
            "fetch", "--manifest", manifest, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "cache",
            "--attempts", "1", "--connections", "1",
        )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert files_under(tmp_path / "cache" / "partial") == []


def write_partial(cache: Path, sha: str, size: int, record: dict) -> None:
    (cache / "partial").mkdir(parents=True, exist_ok=True)
    (cache / "locks").mkdir(exist_ok=True)
    with open(cache / "partial" / sha, "wb") as fh:
        fh.write(b"\x01" * size)
    doc = {"version": 1, "url": "http://127.0.0.1:1/x", "done": [[0, size]], **record}
    (cache / "partial" / f"{sha}.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "record",
    [
        pytest.param({"size": None, "etag": None, "modified": None}, id="no-size-no-validator"),
        pytest.param({"size": None, "etag": '"x"', "modified": None}, id="no-size"),
    ],
)
def test_prune_reclaims_a_young_partial_of_unknown_size(tmp_path: Path, record: dict) -> None:
    """A fetch killed while a source without end streamed: its partial is bounded by nothing, so it goes."""
    cache = tmp_path / "cache"
    write_partial(cache, NEVER, 8 * MIB, record)
    proc = bake("cache", "prune", "--cache-dir", cache)
    assert proc.returncode == 0, proc.stderr
    assert files_under(cache / "partial") == []
    assert "freed 8.0 MiB" in proc.stdout, proc.stdout


def test_prune_reclaims_every_partial_no_running_fetch_holds(tmp_path: Path) -> None:
    """The contract's default: a young, resumable partial goes too, unless a fetch holds it."""
    cache = tmp_path / "cache"
    record = {"size": 8 * MIB, "etag": '"x"', "modified": None}
    write_partial(cache, NEVER, 8 * MIB, record)
    held = "f" * 64
    write_partial(cache, held, 4 * MIB, {**record, "size": 4 * MIB})
    with open(cache / "locks" / f"{held}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a running fetch
        proc = bake("cache", "prune", "--cache-dir", cache)
    assert proc.returncode == 0, proc.stderr
    assert files_under(cache / "partial") == [held, f"{held}.json"]
    assert "freed 8.0 MiB" in proc.stdout and "1 in use and left alone" in proc.stdout, proc.stdout

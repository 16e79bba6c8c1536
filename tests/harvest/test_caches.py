"""bake/harvest/caches.py: what a job's caches hold, read offline. A hostile cache is listed and nothing
outside it read; a declared consumer's file is named with its ``bake add`` line; a tiktoken cache gets a
line per file without tiktoken, and a partial download is named as one."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from bake.consumers import sha1_name
from tests.harvest.conftest import PRELUDE, VOCAB, VOCAB_URL, bare_harvest, harvest, known_vocab

pytestmark = pytest.mark.timeout(120)


def _repo(cache: Path, folder: str = "models--org--bad") -> tuple[Path, str]:
    commit = "c" * 40
    (cache / folder / "snapshots" / commit).mkdir(parents=True)
    (cache / folder / "blobs").mkdir()
    (cache / folder / "refs").mkdir()
    return cache / folder, commit


def _link(repo: Path, commit: str, name: str, target: str) -> None:
    (repo / "snapshots" / commit / name).symlink_to(target)


def hostile_link_to_file(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    (outside / "secret").write_bytes(b"secret\n")
    _link(repo, commit, "config.json", str(outside / "secret"))
    return "config.json: a link to"


def hostile_relative_escape(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    _link(repo, commit, "config.json", "../../../../outside/secret")
    return "config.json: a link to '../../../../outside/secret'"


def hostile_link_to_fifo(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    os.mkfifo(outside / "fifo")
    _link(repo, commit, "config.json", str(outside / "fifo"))
    return "config.json: a link to"


def hostile_fifo_blob(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    etag = "e" * 40
    os.mkfifo(repo / "blobs" / etag)
    _link(repo, commit, "config.json", f"../../blobs/{etag}")
    return f"its blob {etag} is a FIFO"


def hostile_blob_bytes(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    etag = hashlib.sha256(b"the real bytes").hexdigest()
    (repo / "blobs" / etag).write_bytes(b"other bytes")
    _link(repo, commit, "model.bin", f"../../blobs/{etag}")
    return "its blob's bytes do not match its name"


def hostile_ref_to_missing_snapshot(cache: Path, outside: Path) -> str:
    repo, _ = _repo(cache)
    (repo / "refs" / "main").write_text("d" * 40)
    return f"refs/main: names commit {'d' * 40}, but snapshots/{'d' * 40} is missing"


def hostile_ref_not_hex(cache: Path, outside: Path) -> str:
    repo, _ = _repo(cache)
    (repo / "refs" / "main").write_text("z" * 40)
    return "refs/main: holds 'zzzz"


def hostile_dotdot_name(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache, "models--org--a..b")
    (repo / "blobs" / hashlib.sha256(b"x").hexdigest()).write_bytes(b"x")
    _link(repo, commit, "x.bin", f"../../blobs/{hashlib.sha256(b'x').hexdigest()}")
    return "models--org--a..b: not pinnable"


def hostile_partial(cache: Path, outside: Path) -> str:
    repo, _ = _repo(cache)
    (repo / "blobs" / f"{'a' * 64}.incomplete").write_bytes(b"half")
    return "a partial download (.incomplete)"


HOSTILE = [
    hostile_link_to_file,
    hostile_relative_escape,
    hostile_link_to_fifo,
    hostile_fifo_blob,
    hostile_blob_bytes,
    hostile_ref_to_missing_snapshot,
    hostile_ref_not_hex,
    hostile_dotdot_name,
    hostile_partial,
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", HOSTILE, ids=[f.__name__ for f in HOSTILE])
def test_a_hostile_cache_is_listed_and_nothing_is_written(plant, tmp_path: Path) -> None:
    cache, outside = tmp_path / "hub", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    expected = plant(cache, outside)
    before = {p: p.lstat().st_atime_ns for p in outside.iterdir()}
    manifest = tmp_path / "assets.toml"
    proc = harvest(cache, "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stderr and "not pinned" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not manifest.exists(), "nothing pinnable: no manifest is started"
    assert {p: p.lstat().st_atime_ns for p in outside.iterdir()} == before, "nothing outside was read"


def test_a_declared_consumer_file_is_named_with_the_add_line(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        PRELUDE
        + '[[consumer]]\nname = "whisper"\nlocations = ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]\n\n'
        f'[[asset]]\nname = "x"\npath = "other/x"\nsha256 = "{"0" * 64}"\nurls = ["file:///x"]\n'
    )
    (tmp_path / "xdg" / "whisper").mkdir(parents=True)
    (tmp_path / "xdg" / "whisper" / "base.pt").write_bytes(b"w")
    before = manifest.read_text()
    proc = harvest(tmp_path / "xdg", "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert "`bake add URL --path whisper/base.pt`" in proc.stderr
    assert manifest.read_text() == before
    assert "nothing new to pin" in proc.stdout


# -- without the libraries (issue 37): every file gets a line; a partial is one ----------------------

PARTIAL = f"{sha1_name(VOCAB_URL)}.0b9e2c4e-3f6a-4d2b-9c1e-5a7f8d6e4b3a.tmp"


def not_pinned(proc: subprocess.CompletedProcess[str], name: str) -> str:
    (line,) = [
        line for line in proc.stderr.splitlines() if line.startswith("bake: not pinned:") and name in line
    ]
    return line


@pytest.mark.parametrize("layout", ["the directory itself", "a TMPDIR holding tiktoken-rs-cache"])
def test_a_tiktoken_cache_without_tiktoken_gets_a_line_per_file(tmp_path: Path, layout: str) -> None:
    cache = tmp_path / "tmp" / "tiktoken-rs-cache"
    cache.mkdir(parents=True)
    (cache / sha1_name(VOCAB_URL)).write_bytes(VOCAB)
    (cache / PARTIAL).write_bytes(VOCAB[:5])
    proc = bare_harvest(cache if layout == "the directory itself" else tmp_path / "tmp",
                        "--manifest", tmp_path / "assets.toml")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no cache of any consumer" not in proc.stderr, proc.stderr
    whole = not_pinned(proc, sha1_name(VOCAB_URL) + ":")
    assert "tiktoken is not installed here" in whole and f"--path tiktoken/{sha1_name(VOCAB_URL)}`" in whole
    partial = not_pinned(proc, PARTIAL)
    assert "a partial download" in partial and "bake add" not in partial, partial
    assert not (tmp_path / "assets.toml").exists()


def test_a_partial_vocab_is_named_as_one_with_tiktoken_installed(tmp_path: Path) -> None:
    (tmp_path / "tiktoken-rs-cache").mkdir()
    (tmp_path / "tiktoken-rs-cache" / PARTIAL).write_bytes(VOCAB[:5])
    manifest = tmp_path / "assets.toml"
    known_vocab(manifest)
    proc = harvest(tmp_path / "tiktoken-rs-cache", "--manifest", manifest)
    partial = not_pinned(proc, PARTIAL)
    assert "a partial download" in partial and "bake add" not in partial, partial

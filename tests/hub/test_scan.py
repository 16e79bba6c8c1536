"""bake.hub.scan: a Hub cache a job filled, read offline and never through a link: what can be pinned."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bake.hub import scan
from tests.hub_server import git_blob_id, lfs_pointer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = b'{"model_type": "bert"}\n'
WEIGHTS = b"weights" * 100
FOLDER = "models--org--tiny"


def cached(cache: Path, folder: str = FOLDER) -> Path:
    """A repository folder as huggingface_hub leaves it: a ref, a snapshot of two links, their blobs."""
    repo = cache / folder
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    (snapshot / "w").mkdir(parents=True)
    small, large = git_blob_id(CONFIG), hashlib.sha256(WEIGHTS).hexdigest()
    (repo / "blobs" / small).write_bytes(CONFIG)
    (repo / "blobs" / large).write_bytes(WEIGHTS)
    (snapshot / "config.json").symlink_to(f"../../blobs/{small}")
    (snapshot / "w/model.bin").symlink_to(f"../../../blobs/{large}")
    return repo


def test_a_cache_as_huggingface_hub_leaves_it_is_pinned_whole(tmp_path: Path) -> None:
    cached(tmp_path / "cache")
    commits, problems = scan.scan_cache(str(tmp_path / "cache"), str(tmp_path / "assets"))
    assert problems == []
    (commit,) = commits
    assert (commit.folder, commit.kind, commit.repo, commit.commit, commit.ref) == (
        FOLDER, "model", "org/tiny", COMMIT, "main"
    )  # fmt: skip
    sha = hashlib.sha256(WEIGHTS).hexdigest()
    assert commit.files == (
        scan.CachedFile(
            "config.json", len(CONFIG), hashlib.sha256(CONFIG).hexdigest(), git_blob_id(CONFIG), False
        ),
        scan.CachedFile("w/model.bin", len(WEIGHTS), sha, git_blob_id(lfs_pointer(sha, len(WEIGHTS))), True),
    )


def _damaged_blob(repo: Path) -> str:
    (repo / "blobs" / git_blob_id(CONFIG)).write_bytes(b"other bytes")
    return "its blob's bytes do not match its name: git blob id"


def _dangling(repo: Path) -> str:
    (repo / "blobs" / git_blob_id(CONFIG)).unlink()
    return "a dangling link: its blob"


def _outside(repo: Path) -> str:
    link = repo / "snapshots" / COMMIT / "config.json"
    link.unlink()
    link.symlink_to("/etc/hostname")
    return "a link to '/etc/hostname', not to ../../blobs/<etag> of its own repository"


def _copied(repo: Path) -> str:
    link = repo / "snapshots" / COMMIT / "config.json"
    link.unlink()
    link.write_bytes(CONFIG)
    return "a file, not a link to a blob: its ETag is unknown"


def _bad_ref(repo: Path) -> str:
    (repo / "refs/main").write_text("not a commit")
    return "holds 'not a commit', not a commit"


def _partial(repo: Path) -> str:
    (repo / "blobs" / "abc.incomplete").write_bytes(b"half")
    return "a partial download (.incomplete)"


def _short_snapshot(repo: Path) -> str:
    (repo / "snapshots" / "main").mkdir()
    return "a snapshot not named by a full commit"


@pytest.mark.parametrize(
    "spoil",
    [_damaged_blob, _dangling, _outside, _copied, _bad_ref, _partial, _short_snapshot],
    ids=lambda f: f.__name__.strip("_"),
)
def test_what_cannot_be_pinned_is_named_with_why(tmp_path: Path, spoil: Callable[[Path], str]) -> None:
    why = spoil(cached(tmp_path / "cache"))
    commits, problems = scan.scan_cache(str(tmp_path / "cache"), str(tmp_path / "assets"))
    assert [p.why for p in problems if why in p.why] != [], problems
    assert all(p.where.startswith(str(tmp_path / "cache" / FOLDER)) for p in problems)
    pinned = {f.path for c in commits for f in c.files}
    assert "config.json" not in pinned or spoil in (_bad_ref, _partial, _short_snapshot)
    assert "w/model.bin" in pinned


def test_the_entrypoints_links_into_the_baked_assets_are_skipped(tmp_path: Path) -> None:
    repo = cached(tmp_path / "cache")
    assets = tmp_path / "assets"
    (repo / "snapshots" / COMMIT / "config.json").unlink()
    (repo / "snapshots" / COMMIT / "config.json").symlink_to(assets / "hub" / FOLDER / "blobs" / "x")
    (tmp_path / "cache" / "models--org--baked").symlink_to(assets / "hub" / "models--org--baked")
    commits, problems = scan.scan_cache(str(tmp_path / "cache"), str(assets))
    assert problems == []
    assert [f.path for c in commits for f in c.files] == ["w/model.bin"]


def test_a_space_and_a_linked_folder_are_never_read(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached(cache, "spaces--org--demo")
    (cache / "models--org--elsewhere").symlink_to(tmp_path)
    commits, problems = scan.scan_cache(str(cache), str(tmp_path / "assets"))
    assert commits == []
    assert {(Path(p.where).name, p.why) for p in problems} == {
        ("models--org--elsewhere", "not a real directory: never followed"),
        ("spaces--org--demo", "not a model or dataset repository (spaces are not baked)"),
    }


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("models--org--tiny", ("model", "org/tiny")),
        ("datasets--org--my--table", ("dataset", "org/my--table")),
        ("spaces--org--demo", None),
    ],
)
def test_a_folder_names_its_kind_and_repository(folder: str, expected: tuple | None) -> None:
    assert scan.repo_of(folder) == expected


def test_read_regular_refuses_a_fifo_at_once_and_never_follows_a_link(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="a FIFO, not a regular file"):
        b"".join(scan.read_regular(str(fifo)))
    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    with pytest.raises(OSError):
        b"".join(scan.read_regular(str(tmp_path / "link")))
    with pytest.raises(ValueError, match="5 bytes, more than the 4"):
        b"".join(scan.read_regular(str(tmp_path / "file"), limit=4))
    assert b"".join(scan.read_regular(str(tmp_path / "file"), limit=5)) == b"12345"

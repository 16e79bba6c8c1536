"""bake/context/check.py: mode drift passes, content changes fail with a listing, a corrupt index is
exit 4, and untracked files are reported (or refused under ``strict``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bake.context import check_context
from bake.errors import ContextDirty, GitError
from tests.gitrepo import commit_all
from tests.runners import git, sh

DRIFT = {
    "worktree chmod +x": "chmod +x README.md",
    "worktree chmod -x": "chmod -x run.sh",
    "staged chmod +x": "chmod +x README.md && git add README.md",
    "staged chmod -x": "chmod -x run.sh && git add run.sh",
    "staged via update-index only": "git update-index --chmod=+x src/app.py",
    "staged and worktree drift": "chmod +x README.md src/app.py && git add README.md",
    "stat-only change": "touch -d 2001-01-01 README.md src/app.py",
}


@pytest.mark.parametrize("script", DRIFT.values(), ids=DRIFT.keys())
def test_mode_drift_passes(repo: Path, script: str) -> None:
    sh(repo, script)
    report = check_context(repo)
    assert report.root == repo
    assert report.untracked == ()


def test_clean_repository_passes_from_a_subdirectory(repo: Path) -> None:
    assert check_context(repo / "src").root == repo


def test_mode_drift_inside_a_submodule_passes(superproject: Path) -> None:
    (superproject / "sub" / "lib.txt").chmod(0o755)
    assert check_context(superproject).root == superproject


DIRTY = {
    "unstaged edit": ("echo edited >> README.md", ["M\tREADME.md"], "the working tree (unstaged)"),
    "staged edit": ("echo edited >> README.md && git add README.md", ["M\tREADME.md"], "the index (staged)"),
    "staged edit, worktree back at HEAD": (
        "echo edited >> README.md && git add README.md && git show HEAD:README.md > README.md",
        ["M\tREADME.md"],
        "the index (staged) and the working tree (unstaged)",
    ),
    "edit hidden behind mode drift": (
        "chmod +x README.md && echo x >> README.md",
        ["M\tREADME.md"],
        "unstaged",
    ),
    "staged edit with mode change": (
        "echo x >> README.md && chmod +x README.md && git add README.md",
        ["M\tREADME.md", " mode change 100644 => 100755 README.md"],
        "staged",
    ),
    "unstaged deletion": ("rm README.md", ["D\tREADME.md", " delete mode 100644 README.md"], "unstaged"),
    "staged deletion": ("git rm -q README.md", ["D\tREADME.md", " delete mode 100644 README.md"], "staged"),
    "rename": (
        "git mv src/app.py src/main.py",
        ["R100\tsrc/app.py\tsrc/main.py", " rename src/app.py => src/main.py (100%)"],
        "staged",
    ),
    "staged new file": (
        "echo new > new.txt && git add new.txt",
        ["A\tnew.txt", " create mode 100644 new.txt"],
        "staged",
    ),
    "symlink retargeted": ("ln -sfn run.sh link", ["M\tlink"], "unstaged"),
    "file replaced by a symlink": (
        "rm README.md && ln -s run.sh README.md && git add README.md",
        ["T\tREADME.md", " mode change 100644 => 120000 README.md"],
        "staged",
    ),
}


@pytest.mark.parametrize(("script", "expected", "where"), DIRTY.values(), ids=DIRTY.keys())
def test_content_change_fails_with_listing(repo: Path, script: str, expected: list[str], where: str) -> None:
    sh(repo, script)
    with pytest.raises(ContextDirty) as caught:
        check_context(repo)
    lines = str(caught.value).splitlines()
    assert "tracked content differs from HEAD" in lines[0]
    assert where in lines[0]
    for line in expected:
        assert line in lines[1:]
    assert caught.value.exit_code == 1


SUBMODULE = {
    "pointer moved in the worktree": ("cd sub && echo v2 > lib.txt && git commit -qam v2", "unstaged"),
    "pointer moved and staged": (
        "cd sub && echo v2 > lib.txt && git commit -qam v2 && cd .. && git add sub",
        "staged",
    ),
    "uncommitted edit inside the submodule": ("echo local >> sub/lib.txt", "unstaged"),
}


@pytest.mark.parametrize(("script", "where"), SUBMODULE.values(), ids=SUBMODULE.keys())
def test_submodule_change_fails(superproject: Path, script: str, where: str) -> None:
    sh(superproject, script)
    with pytest.raises(ContextDirty) as caught:
        check_context(superproject)
    lines = str(caught.value).splitlines()
    assert where in lines[0]
    assert "M\tsub" in lines[1:]


@pytest.mark.parametrize("staged", [False, True], ids=["unstaged", "staged"])
def test_listing_is_capped_at_50_plus_50(repo: Path, staged: bool) -> None:
    many = repo / "many"
    many.mkdir()
    for n in range(120):
        (many / f"f{n:03}.txt").write_text(f"{n}\n")
    commit_all(repo, "120 files")
    shutil.rmtree(many)
    if staged:
        git(repo, "add", "-A")
    with pytest.raises(ContextDirty) as caught:
        check_context(repo)
    lines = str(caught.value).splitlines()
    assert "120 change(s), the first 50 listed" in lines[0]
    assert lines[1:51] == [f"D\tmany/f{n:03}.txt" for n in range(50)]
    assert lines[51:] == [f" delete mode 100644 many/f{n:03}.txt" for n in range(50)]


NAMES = {
    "space": ("with space.txt", "with space.txt"),
    "latin-1 range": ("ünïcødé.txt", "ünïcødé.txt"),
    "cjk directory": ("日本語/ファイル 名.txt", "日本語/ファイル 名.txt"),
    "emoji": ("📦 bake.txt", "📦 bake.txt"),
    "tab and newline escaped": ("tab\there\nnl.txt", "tab\\there\\nnl.txt"),
}


@pytest.mark.parametrize(("name", "shown"), NAMES.values(), ids=NAMES.keys())
def test_odd_names_are_listed_verbatim(repo: Path, name: str, shown: str) -> None:
    path = repo / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("v1\n")
    commit_all(repo)
    path.write_text("v2\n")
    with pytest.raises(ContextDirty) as caught:
        check_context(repo)
    assert str(caught.value).splitlines()[1:] == [f"M\t{shown}"]


def _garbage(data: bytes) -> bytes:
    return os.urandom(len(data))


def _flip_entry_byte(data: bytes) -> bytes:
    return data[:40] + bytes([data[40] ^ 0xFF]) + data[41:]


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "garbage": _garbage,
    "empty": lambda data: b"",
    "header only": lambda data: data[:12],
    "truncated to 30 bytes": lambda data: data[:30],
    # git 2.39 reads these two without complaint and reports garbage entries as differences.
    "truncated in half": lambda data: data[: len(data) // 2],
    "one entry byte flipped": _flip_entry_byte,
    "bad signature": lambda data: b"XXXX" + data[4:],
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupt_index(repo: Path, corrupt: Callable[[bytes], bytes]) -> None:
    index = repo / ".git" / "index"
    index.write_bytes(corrupt(index.read_bytes()))
    with pytest.raises(GitError) as caught:
        check_context(repo)
    assert "index check failed" in str(caught.value)
    assert caught.value.exit_code == 4


def test_strict_refuses_untracked_files(repo: Path) -> None:
    (repo / "stray file.txt").write_text("x")
    with pytest.raises(ContextDirty) as caught:
        check_context(repo, strict=True)
    lines = str(caught.value).splitlines()
    assert "1 untracked file(s)" in lines[0]
    assert lines[1:] == ["stray file.txt"]


def test_strict_passes_when_untracked_files_are_ignored(repo: Path) -> None:
    (repo / ".git" / "info" / "exclude").write_text("*.tmp\n.dockerignore\n")
    (repo / ".dockerignore").write_text("cache/\n")
    (repo / "x.tmp").write_text("x")
    (repo / "cache").mkdir()
    (repo / "cache" / "blob").write_text("x")
    assert check_context(repo, strict=True).untracked == ()

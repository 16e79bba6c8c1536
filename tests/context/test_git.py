"""bake/context/git.py: finding the repository, and every way git fails named with the check it served
and how git ended (exit 4)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bake.context import check_context
from bake.context.git import display, git_env, open_repo
from bake.context.git import git as run_git
from bake.errors import GitError, UsageError
from tests.runners import git

REAL_GIT = shutil.which("git")


def test_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError) as caught:
        check_context(plain)
    assert "repository lookup failed" in str(caught.value)
    assert "exit 128: fatal: not a git repository" in str(caught.value)
    assert caught.value.exit_code == 4


def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        check_context(tmp_path / "nowhere")


def test_unborn_head(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "staged.txt").write_text("x\n")
    git(empty, "add", "staged.txt")
    with pytest.raises(GitError, match="HEAD names no commit"):
        check_context(empty)


@pytest.fixture
def fake_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], None]:
    """Install a `git` first on PATH that runs ACTION when its arguments contain WORDS, else real git."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def install(words: str, action: str) -> None:
        script = bin_dir / "git"
        script.write_text(f'#!/bin/sh\ncase " $* " in *" {words} "*) {action};; esac\nexec {REAL_GIT} "$@"\n')
        script.chmod(0o755)

    return install


GIT_DEATHS = {
    "worktree check killed by SIGABRT": (
        "diff --quiet",
        "kill -ABRT $$",
        "working-tree check",
        "killed by SIGABRT",
    ),
    "index check killed by SIGSEGV": ("diff --cached", "kill -SEGV $$", "index check", "killed by SIGSEGV"),
    "worktree check exits 2": (
        "diff --quiet",
        "echo 'fatal: boom' >&2; exit 2",
        "working-tree check",
        "exit 2: fatal: boom",
    ),
    "index check exits 128": ("diff --cached", "exit 128", "index check", "exit 128"),
    "untracked listing exits 129": ("ls-files", "exit 129", "untracked listing", "exit 129"),
    "HEAD lookup killed by SIGKILL": ("--verify", "kill -KILL $$", "HEAD lookup", "killed by SIGKILL"),
}


@pytest.mark.parametrize(("words", "action", "check", "how"), GIT_DEATHS.values(), ids=GIT_DEATHS.keys())
def test_git_failure_names_the_check_and_how_git_ended(
    repo: Path, fake_git: Callable[[str, str], None], words: str, action: str, check: str, how: str
) -> None:
    fake_git(words, action)
    with pytest.raises(GitError) as caught:
        check_context(repo)
    assert f"{check} failed" in str(caught.value)
    assert how in str(caught.value)


def test_git_missing_from_path(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(GitError, match="cannot run git") as caught:
        check_context(repo)
    assert caught.value.exit_code == 4


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain.txt", "plain.txt"),
        ("ünïcødé.txt", "ünïcødé.txt"),
        ("tab\there\nnl.txt", "tab\\there\\nnl.txt"),
        (os.fsdecode(b"\xff.txt"), "\\xff.txt"),
    ],
    ids=["plain", "unicode", "control characters", "undecodable byte"],
)
def test_display_escapes_what_a_terminal_would_act_on(name: str, shown: str) -> None:
    assert display(name) == shown


def test_git_runs_without_the_variables_that_name_another_repository(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"):
        monkeypatch.setenv(name, "/elsewhere")
    env = git_env(GIT_INDEX_FILE="/tmp/scratch-index")
    assert not {"GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR"} & set(env)
    assert env["GIT_INDEX_FILE"] == "/tmp/scratch-index" and env["GIT_OPTIONAL_LOCKS"] == "0"


def test_open_repo_finds_the_top_level_and_head_from_a_subdirectory(repo: Path) -> None:
    found = open_repo(repo / "src")
    assert found.root == repo and found.object_format == "sha1"
    assert found.head == git(repo, "rev-parse", "HEAD").decode().strip()


def test_an_exit_code_the_caller_allows_is_returned_not_raised(repo: Path) -> None:
    (repo / "README.md").write_text("edited\n")
    proc = run_git(repo, ["diff", "--quiet"], "working-tree check", ok=(0, 1))
    assert proc.returncode == 1
    with pytest.raises(GitError, match=r"working-tree check failed in .*: `git diff --quiet` exit 1"):
        run_git(repo, ["diff", "--quiet"], "working-tree check")

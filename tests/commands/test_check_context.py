"""``bake check-context`` run as a user runs it: its exit codes, its warning of untracked files and
``--export`` (bake/commands/check_context.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gitrepo import committed_repo, exported_files, head_files
from tests.isolation import isolate_git
from tests.runners import bake, sh


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed repository, git isolated from the machine's config."""
    isolate_git(tmp_path, monkeypatch)
    return committed_repo(tmp_path / "repo")


CLI = {
    "clean": ("", [], 0, ""),
    "mode drift": ("chmod +x README.md && git add README.md && chmod -x run.sh", [], 0, ""),
    "content edit": ("echo x >> README.md", [], 1, "M\tREADME.md"),
    "untracked warns": ("echo x > stray.txt", [], 0, "stray.txt"),
    "untracked with --strict": ("echo x > stray.txt", ["--strict"], 1, "stray.txt"),
    "not a repository": ("rm -rf .git", [], 4, "not a git repository"),
    "corrupt index": ("head -c 64 /dev/urandom > .git/index", [], 4, "index check failed"),
}


@pytest.mark.parametrize(("script", "flags", "code", "stderr"), CLI.values(), ids=CLI.keys())
def test_cli_exit_codes(repo: Path, script: str, flags: list[str], code: int, stderr: str) -> None:
    if script:
        sh(repo, script)
    result = bake("check-context", str(repo), *flags, cwd=repo.parent)
    assert result.returncode == code, result.stderr
    assert stderr in result.stderr
    assert (result.stderr != "") == (code != 0 or stderr != "")


def test_cli_export(repo: Path, tmp_path: Path) -> None:
    result = bake("check-context", "--export", str(tmp_path / "ctx"), cwd=repo)
    assert result.returncode == 0, result.stderr
    assert exported_files(tmp_path / "ctx") == head_files(repo)


def test_the_untracked_warning_lists_50_and_counts_the_rest(repo: Path) -> None:
    for n in range(60):
        (repo / f"stray{n:02}.txt").write_text("x")
    result = bake("check-context", cwd=repo)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "60 untracked file(s) would enter a plain build context" in lines[0]
    assert lines[1:] == [f"  stray{n:02}.txt" for n in range(50)] + ["  … and 10 more"]

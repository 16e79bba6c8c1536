"""bake/context/export.py: HEAD's tree written with normal modes, into a new or empty directory only,
complete or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bake.context import export_context
from bake.errors import GitError, UsageError
from tests.gitrepo import exported_files, head_files
from tests.runners import git, sh


def test_export_holds_heads_content_not_the_worktrees(repo: Path, tmp_path: Path) -> None:
    (repo / "README.md").write_text("unstaged edit\n")
    (repo / "src" / "app.py").write_text("staged edit\n")
    git(repo, "add", "src/app.py")
    (repo / "untracked.txt").write_text("x")
    out = export_context(repo, tmp_path / "ctx")
    assert out == tmp_path / "ctx"
    assert exported_files(out) == head_files(repo)
    assert (out / "link").is_symlink()
    assert not (out / ".git").exists()
    # The repository's own index was not touched.
    assert git(repo, "diff", "--cached", "--name-only") == b"src/app.py\n"


@pytest.mark.parametrize("umask", [0o077, 0o000, 0o027], ids=oct)
def test_export_normalises_modes_despite_drift_and_umask(repo: Path, tmp_path: Path, umask: int) -> None:
    sh(repo, "chmod +x README.md && chmod -x run.sh && git add README.md run.sh && chmod 600 src/app.py")
    old = os.umask(umask)
    try:
        out = export_context(repo, tmp_path / "ctx")
    finally:
        os.umask(old)
    modes = {
        str(p.relative_to(out)): stat.S_IMODE(p.lstat().st_mode) for p in out.rglob("*") if not p.is_symlink()
    }
    assert modes == {"README.md": 0o644, "run.sh": 0o755, "src": 0o755, "src/app.py": 0o644}
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_export_into_an_existing_empty_directory(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "ctx").mkdir()
    assert exported_files(export_context(repo, tmp_path / "ctx")) == head_files(repo)


@pytest.mark.parametrize("occupant", ["ctx/keep", "ctx"], ids=["non-empty directory", "plain file"])
def test_export_refuses_an_occupied_target(repo: Path, tmp_path: Path, occupant: str) -> None:
    (tmp_path / occupant).parent.mkdir(exist_ok=True)
    (tmp_path / occupant).write_text("mine")
    with pytest.raises(UsageError, match="not an empty directory"):
        export_context(repo, tmp_path / "ctx")
    assert (tmp_path / occupant).read_text() == "mine"


def test_failed_export_leaves_nothing_behind(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(GitError):
        export_context(empty, tmp_path / "ctx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]

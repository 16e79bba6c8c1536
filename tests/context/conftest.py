"""Shared by the context tests: git isolated from the machine's config, a committed repository, and one
with a submodule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gitrepo import commit_all, committed_repo
from tests.isolation import isolate_git
from tests.runners import git


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_git(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_repo(tmp_path / "repo")


@pytest.fixture
def superproject(tmp_path: Path, repo: Path) -> Path:
    """REPO with a submodule `sub` cloned from a local repository."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "lib.txt").write_text("lib v1\n")
    commit_all(upstream, "lib v1")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub")
    commit_all(repo, "add submodule")
    return repo

"""check-context against edits git's own diff does not read: skip-worktree, assume-unchanged, clean filters.

Each is compared with the bytes checkout would write (issue 10, class 8): exit 1
for a plain check, a warning and HEAD's bytes under --export. The git isolation and the committed
repository are tests/context/conftest.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gitrepo import exported_files, head_files
from tests.runners import bake, git, sh

HIDDEN_EDITS = {
    "skip-worktree edit": (
        "git update-index --skip-worktree README.md && echo edited >> README.md",
        "README.md",
        "skip-worktree",
    ),
    "skip-worktree delete": (
        "git update-index --skip-worktree README.md && rm README.md",
        "README.md",
        "skip-worktree",
    ),
    "assume-unchanged edit": (
        "git update-index --assume-unchanged src/app.py && echo 'evil()' >> src/app.py",
        "src/app.py",
        "assume-unchanged",
    ),
    "skip-worktree link retarget": (
        "git update-index --skip-worktree link && ln -sfn run.sh link",
        "link",
        "skip-worktree",
    ),
    "clean filter hides an edit": (
        # The clean command answers HEAD's bytes whatever the file holds, so `git diff` sees nothing.
        "printf 'README.md filter=hide\\n' > .git/info/attributes"
        " && git config filter.hide.clean 'echo readme' && echo edited > README.md",
        "README.md",
        "clean filter",
    ),
}


@pytest.mark.parametrize(("script", "path", "why"), HIDDEN_EDITS.values(), ids=HIDDEN_EDITS.keys())
def test_edits_hidden_from_git_status_fail_the_check(repo: Path, script: str, path: str, why: str) -> None:
    sh(repo, script)
    assert git(repo, "diff", "--quiet") == b"", "the edit must be invisible to git's own diff"
    result = bake("check-context", str(repo), cwd=repo.parent)
    assert result.returncode == 1, result.stderr
    assert f"({why}" in result.stderr and f"\t{path}" in result.stderr


@pytest.mark.parametrize(("script", "path", "why"), HIDDEN_EDITS.values(), ids=HIDDEN_EDITS.keys())
def test_export_warns_about_hidden_edits_and_takes_head(
    repo: Path, tmp_path: Path, script: str, path: str, why: str
) -> None:
    sh(repo, script)
    result = bake("check-context", str(repo), "--export", str(tmp_path / "ctx"), cwd=repo.parent)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr.lower() and path in result.stderr
    assert exported_files(tmp_path / "ctx") == head_files(repo)


UNCHANGED_HIDDEN = {
    "skip-worktree, untouched": "git update-index --skip-worktree README.md",
    "assume-unchanged, untouched": "git update-index --assume-unchanged README.md",
    # Checkout writes smudge(blob); a working tree holding exactly that is clean.
    "smudge and clean filters": (
        "printf '*.md filter=upper\\n' > .gitattributes && git config filter.upper.clean 'tr A-Z a-z'"
        " && git config filter.upper.smudge 'tr a-z A-Z' && git add .gitattributes && git commit -qm attrs"
        " && rm README.md && git checkout -- README.md && grep -q README README.md"
    ),
}


@pytest.mark.parametrize("script", UNCHANGED_HIDDEN.values(), ids=UNCHANGED_HIDDEN.keys())
def test_hidden_entries_that_match_checkout_pass(repo: Path, script: str) -> None:
    sh(repo, script)
    result = bake("check-context", str(repo), cwd=repo.parent)
    assert result.returncode == 0, result.stderr

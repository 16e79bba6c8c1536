"""bake/context/dockerignore.py: which untracked files a build context takes, as BuildKit reads a
.dockerignore, and a bad pattern named by its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.context import check_context
from bake.context.dockerignore import excluded, read_patterns
from bake.errors import UsageError
from tests.gitrepo import commit_all

UNTRACKED = [
    "notes.txt",
    "a.log",
    "sub/a.log",
    "tmp/x/y.bin",
    "tmp/keep.txt",
    "docs/a.md",
    "docs/deep/b.md",
    "ab.txt",
]


DOCKERIGNORE = {
    "no .dockerignore": (None, UNTRACKED),
    "star stays in its directory": ("*.log\n", [p for p in UNTRACKED if p != "a.log"]),
    "double star crosses directories": ("**/*.log\n", [p for p in UNTRACKED if not p.endswith(".log")]),
    "a directory excludes its contents": ("tmp\n", [p for p in UNTRACKED if not p.startswith("tmp/")]),
    "negation re-includes": ("tmp\n!tmp/keep.txt\n", [p for p in UNTRACKED if p != "tmp/x/y.bin"]),
    "later lines win": ("!notes.txt\n*.txt\n", [p for p in UNTRACKED if p not in ("notes.txt", "ab.txt")]),
    "comments, blanks and a leading slash": (
        "# notes.txt\n\n   \n/notes.txt\n  docs/*.md  \n",
        [p for p in UNTRACKED if p not in ("notes.txt", "docs/a.md")],
    ),
    "question mark is one character": ("??.txt\n", [p for p in UNTRACKED if p != "ab.txt"]),
    "character class": ("[ab].log\n", [p for p in UNTRACKED if p != "a.log"]),
    "trailing double star is a prefix": ("doc**\n", [p for p in UNTRACKED if not p.startswith("docs/")]),
    "double star in the middle": ("docs/**/*.md\n", [p for p in UNTRACKED if not p.startswith("docs/")]),
    "everything but one": ("**\n!notes.txt\n", ["notes.txt"]),
    "byte-order mark and CRLF": (
        "\ufeff*.log\r\nab.txt\r\n",
        [p for p in UNTRACKED if p not in ("a.log", "ab.txt")],
    ),
}


@pytest.mark.parametrize(("dockerignore", "expected"), DOCKERIGNORE.values(), ids=DOCKERIGNORE.keys())
def test_untracked_report_honours_dockerignore(
    repo: Path, dockerignore: str | None, expected: list[str]
) -> None:
    (repo / ".gitignore").write_text("*.o\nbuild/\n.dockerignore\n")
    commit_all(repo, "gitignore")
    if dockerignore is not None:
        (repo / ".dockerignore").write_bytes(dockerignore.encode())
    for name in [*UNTRACKED, "main.o", "build/out.bin"]:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(name)
    assert check_context(repo).untracked == tuple(sorted(expected))


def test_bad_dockerignore_pattern_is_a_usage_error(repo: Path) -> None:
    (repo / ".git" / "info" / "exclude").write_text(".dockerignore\n")
    (repo / ".dockerignore").write_text("ok\n!\n")
    (repo / "new.txt").write_text("x")
    with pytest.raises(UsageError, match=r"\.dockerignore:2"):
        check_context(repo)


def test_a_missing_dockerignore_excludes_nothing(tmp_path: Path) -> None:
    assert read_patterns(tmp_path / ".dockerignore") == []
    assert not excluded([], "any/file.txt")


@pytest.mark.parametrize(
    ("path", "is_excluded"),
    [
        ("build", True),
        ("build/a.o", True),
        ("build/keep", False),
        ("x.log", True),
        ("logs/x.log", False),
        ("src/app.py", False),
    ],
)
def test_a_directory_excludes_its_contents_and_a_later_negation_re_includes(
    tmp_path: Path, path: str, is_excluded: bool
) -> None:
    (tmp_path / ".dockerignore").write_text("build\n!build/keep\n*.log\n")
    assert excluded(read_patterns(tmp_path / ".dockerignore"), path) is is_excluded

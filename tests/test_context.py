"""check-context on real git repositories: mode drift passes, content changes fail, git failures are 4."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from bake.context import check_context, export_context
from bake.errors import ContextDirty, GitError, UsageError
from tests.gitrepo import commit_all, committed_repo, exported_files, head_files
from tests.isolation import isolate_git
from tests.runners import bake, git, sh

REAL_GIT = shutil.which("git")


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


# ---- exit 0: mode drift is tolerated ---------------------------------------------------------

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


# ---- exit 1: content changes are refused, with a listing --------------------------------------

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


# ---- exit 4: git could not answer -------------------------------------------------------------


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


# ---- untracked files and .dockerignore ---------------------------------------------------------

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


# ---- --export -----------------------------------------------------------------------------------


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


# ---- the command line ----------------------------------------------------------------------------


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

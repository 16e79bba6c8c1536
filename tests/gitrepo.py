"""A small committed git repository for context-check tests, and readers for HEAD and an export."""

from __future__ import annotations

import os
from pathlib import Path

from tests.runners import git


def commit_all(cwd: Path, message: str = "c") -> None:
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)


def committed_repo(root: Path) -> Path:
    """Return ``root`` as a committed repository: a script (0755), a text file, a nested file, a symlink."""
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("readme\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "src" / "app.py").write_text("print('app')\n")
    (root / "link").symlink_to("README.md")
    commit_all(root, "initial")
    return root


def head_files(repo: Path) -> dict[str, bytes]:
    """HEAD's tree as {path: blob bytes}."""
    listing = git(repo, "ls-tree", "-r", "-z", "HEAD").split(b"\0")
    files = {}
    for entry in filter(None, listing):
        meta, name = entry.split(b"\t", 1)
        files[os.fsdecode(name)] = git(repo, "cat-file", "blob", meta.split()[2].decode())
    return files


def exported_files(out: Path) -> dict[str, bytes]:
    """An exported context as {path: bytes}, a link's bytes being its target."""
    return {
        str(p.relative_to(out)): (bytes(p.readlink()) if p.is_symlink() else p.read_bytes())
        for p in out.rglob("*")
        if p.is_symlink() or p.is_file()
    }

"""The README's ``sh`` blocks as the tests run them, and a copy of the checkout as a user's clone holds it.

A block's first line says how it is checked: a comment saying "needs the real origins" (checked as
far as this machine allows, tests/test_readme.py), one saying "as root" (run on fresh debootstrap
roots by tests/image/test_install.py, before the block after it), or none (run as written, whole).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.runners import REPO, git

MARK = "needs the real origins"
AS_ROOT = "as root"


def blocks() -> list[str]:
    """The text of every ``sh`` block of the README, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def marked(block: str, mark: str) -> bool:
    """Does the block's first line, a comment, carry ``mark``?"""
    first = block.split("\n", 1)[0]
    return first.startswith("#") and mark in first


def commands(block: str) -> list[str]:
    """The commands of a block, continuations joined: comment lines and trailing comments dropped."""
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        command = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if command:
            found.append(command)
    return found


def install_blocks() -> tuple[str, str]:
    """The Install section's root block and the block a user then runs as themselves."""
    every = blocks()
    (at,) = [i for i, b in enumerate(every) if marked(b, AS_ROOT)]
    return every[at], every[at + 1]


def copy_checkout(dest: Path) -> Path:
    """Copy this checkout's tracked files to ``dest``, as a user's clone holds them; return ``dest``."""
    for name in git(REPO, "ls-files", "-z").decode().split("\0"):
        source = REPO / name
        if name and (source.is_file() or source.is_symlink()):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest

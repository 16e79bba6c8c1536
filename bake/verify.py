"""Verification of a destination: every file present, regular, of its size and SHA-256; a seal intact."""

from __future__ import annotations

from pathlib import Path

from bake.asset import Asset
from bake.errors import Problem, VerifyError
from bake.hashes import sha256_file
from bake.index import LockedFile
from bake.seal import check_seal, placement_problems


def _file_problem(dest: Path, entry: LockedFile) -> Problem | None:
    """What is wrong with ``entry``'s file under ``dest`` (it is not reached through a link), or None."""
    target = dest / entry.path
    if not target.is_file():
        missing = not target.exists() and not target.is_symlink()
        seen = "missing" if missing else "not a regular file"
        message = f"{entry.path}: expected a file with sha256 {entry.sha256}, found {seen}"
        return Problem("missing" if missing else "not-regular", message, entry.path, expected=entry.sha256)
    size = target.stat().st_size
    if entry.size is not None and size != entry.size:
        message = f"{entry.path}: expected {entry.size} bytes, found {size}"
        return Problem("size-mismatch", message, entry.path, expected=entry.size, seen=size)
    actual = sha256_file(target)
    if actual != entry.sha256:
        message = f"{entry.path}: expected sha256 {entry.sha256}, found {actual}"
        return Problem("sha256-mismatch", message, entry.path, expected=entry.sha256, seen=actual)
    return None


def verify_dest(dest: Path, files: list[LockedFile], *, assets: list[Asset] | None = None) -> None:
    """Check every file under ``dest``: present, regular, right size, right sha256.

    With the manifest's ``assets``, a sealed ``dest`` must also hold the
    ``bake.serve`` and alias links the consumer table gives. Raises VerifyError
    listing every problem, one per line (and as ``Problem`` values, for the JSON report).
    """
    problems: list[Problem] = []
    misplaced = placement_problems(dest, [entry.path for entry in files])
    for entry in files:
        if text := misplaced.get(entry.path):
            problems.append(Problem("misplaced", text, entry.path))
        elif problem := _file_problem(dest, entry):
            problems.append(problem)
    if assets is not None and not problems:
        problems += [Problem("seal", text) for text in check_seal(dest, assets)]
    if problems:
        raise VerifyError(
            f"{len(problems)} of {len(files)} asset(s) under {dest} failed verification:\n  "
            + "\n  ".join(p.message for p in problems)
            + "\nrerun `bake fetch` to restore them (a tampered image must be rebuilt)",
            problems=tuple(problems),
        )

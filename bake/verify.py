"""Verification of a destination: every file present, regular, of its size and SHA-256; a seal intact."""

from __future__ import annotations

from pathlib import Path

from bake.asset import Asset
from bake.errors import VerifyError
from bake.hashes import sha256_file
from bake.index import LockedFile
from bake.seal import check_seal, placement_problems


def verify_dest(dest: Path, files: list[LockedFile], *, assets: list[Asset] | None = None) -> None:
    """Check every file under ``dest``: present, regular, right size, right sha256.

    With the manifest's ``assets``, a sealed ``dest`` must also hold the
    ``bake.serve`` and alias links the consumer table gives. Raises VerifyError
    listing every problem, one per line.
    """
    problems = []
    misplaced = placement_problems(dest, [entry.path for entry in files])
    for entry in files:
        target = dest / entry.path
        if problem := misplaced.get(entry.path):
            problems.append(problem)
            continue
        if not target.is_file():
            seen = "missing" if not target.exists() and not target.is_symlink() else "not a regular file"
            problems.append(f"{entry.path}: expected a file with sha256 {entry.sha256}, found {seen}")
            continue
        size = target.stat().st_size
        if entry.size is not None and size != entry.size:
            problems.append(f"{entry.path}: expected {entry.size} bytes, found {size}")
            continue
        actual = sha256_file(target)
        if actual != entry.sha256:
            problems.append(f"{entry.path}: expected sha256 {entry.sha256}, found {actual}")
    if assets is not None and not problems:
        problems += check_seal(dest, assets)
    if problems:
        raise VerifyError(
            f"{len(problems)} of {len(files)} asset(s) under {dest} failed verification:\n  "
            + "\n  ".join(problems)
            + "\nrerun `bake fetch` to restore them (a tampered image must be rebuilt)"
        )

"""BAKE_VERIFY=1's hashing: the asset directory against its SHA256SUMS, and what each location serves.

The entrypoint hashes nothing itself: it asks ``bake seed --verify`` first with no location
(every baked file against ``SHA256SUMS``, read by ``bake.index.read_sums``, the format's one
reader beside its writer), then for each location it serves but did not just make.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from bake import hashes, servefile
from bake.seed import nodefs

START = "BAKE_VERIFY=1: "
STOP = "; job not started"


def asset_problems(assets: Path) -> list[str]:
    """One message per baked file that does not hash as SHA256SUMS says (or for a damaged SHA256SUMS)."""
    from bake import index  # the lock's and the sums' reader, only for BAKE_VERIFY=1

    sums = assets / index.SUMS_NAME
    try:
        entries = index.read_sums(assets)
    except OSError:
        return [f"{START}{sums}: expected the baked checksums, saw no readable file; "
                f"rebuild the image or fix BAKE_ASSETS{STOP}"]  # fmt: skip
    except ValueError as exc:
        return [f"{START}{sums} {exc}; rebuild the image, its asset layer is damaged{STOP}"]
    problems = []
    for sha, path in entries:
        seen = _hash(lambda p=path: os.open(assets / p, os.O_RDONLY | os.O_CLOEXEC))
        if seen != f"sha256 {sha}":
            problems.append(
                f"{START}{assets}/{path}: expected sha256 {sha} (SHA256SUMS), saw {seen}; the image's asset "
                f"layer is damaged: pull the image again or rebuild it{STOP}"
            )
    return problems


def served_problem(loc_fd: int, where: str, files: Iterable[servefile.File], *, linked: bool) -> str:
    """The first file served at the location that does not hash as bake.serve records, as a message; "".

    In node storage a name is opened as the regular file it must be; in a linked view, through its link."""
    for record in files:
        parent, _, base = record.name.rpartition("/")

        def opened(parent: str = parent, base: str = base, name: str = record.name) -> int:
            if linked:
                return os.open(f"{where}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            with nodefs.walked(loc_fd, parent.split("/") if parent else [], where) as fd:
                return nodefs.open_regular(fd, base, f"{where}/{name}", os.O_RDONLY)

        seen = _hash(opened)
        if seen != f"sha256 {record.sha256}":
            return (
                f"{START}{where}/{record.name}: expected the baked file's sha256 (bake.serve), saw {seen}; "
                f"remove it, the next start serves the baked file there again{STOP}"
            )
    return ""


def _hash(opened) -> str:
    """``sha256 HEX`` of the file ``opened()`` opens, or what stopped it from being read."""
    try:
        fd = opened()
    except (OSError, nodefs.Planted):
        return "no readable file"
    try:
        return f"sha256 {hashes.sha256_fd(fd)}"
    except OSError:
        return "no readable file"
    finally:
        os.close(fd)

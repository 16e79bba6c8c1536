"""What a location holds against its consumer's ``bake.serve`` records: each name served, missing, or not.

The records come from ``bake.servefile.read``, the format's one reader. In node storage (the
copied view) a baked file is served by a regular file of its size at its name, never a link; a
``link`` record by a link to its target. Anything else at a baked name is a problem, named, and
never changed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from bake import servefile
from bake.errors import UsageError
from bake.seed import nodefs


@dataclass(frozen=True)
class Records:
    """One consumer's records: its set, the directories and the files and links of the served tree.

    ``refused`` are the per-file lines of bake.serve (its tail, which only Python reads) that the reader
    refused, any consumer's: (line number, the rule); ``damaged`` names the first of this consumer's."""

    set: servefile.ServedSet
    dirs: tuple[str, ...]
    files: tuple[servefile.File, ...]
    links: tuple[servefile.Link, ...]
    refused: tuple[tuple[int, str], ...] = ()
    damaged: str = ""

    def linked(self) -> tuple[servefile.File, ...]:
        """The files the linked view serves at their names (the copied view serves every file)."""
        return tuple(f for f in self.files if f.view == "both")

    def top_names(self) -> set[str]:
        """The first component of every name the served tree holds, and of bake's own state."""
        names = [*self.dirs, *(f.name for f in self.files), *(link.name for link in self.links)]
        return {n.split("/")[0] for n in names if n != "."} | {self.set.state.split("/")[0]}


def load(assets: Path, consumer: str) -> Records:
    """Read ``assets/bake.serve`` and return ``consumer``'s records.

    Raises UsageError when the file cannot be read, is not v1, or has no set record for ``consumer``."""
    path = assets / servefile.NAME
    try:
        text = path.read_text(encoding="utf-8")
        reading = servefile.read(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"{path}: cannot read it ({exc}); run the image bake built, or set BAKE_ASSETS"
        ) from None
    except ValueError as exc:
        raise UsageError(f"{path}: expected {exc}; rebuild the image with this bake") from None
    mine = [r for r in reading.records if getattr(r, "consumer", None) == consumer]
    sets = [r for r in mine if isinstance(r, servefile.ServedSet)]
    if not sets:
        raise UsageError(f"{path}: expected a set record for the consumer '{consumer}', saw none")
    lines = text.split("\n") if reading.refused else []
    tail = next(
        (n for n, line in enumerate(lines, 1) if line.startswith(("file\t", "link\t"))), len(lines) + 1
    )
    refused = tuple((number, why) for number, why in reading.refused if number >= tail)
    damaged = next(
        (
            f"{path} line {n}: expected {why}"
            for n, why in refused
            if lines[n - 1].split("\t")[1:2] == [consumer]
        ),
        "",
    )
    return Records(
        sets[0],
        tuple(r.path for r in mine if isinstance(r, servefile.Dir)),
        tuple(r for r in mine if isinstance(r, servefile.File)),
        tuple(r for r in mine if isinstance(r, servefile.Link)),
        refused,
        damaged,
    )


Name = servefile.File | servefile.Link


@dataclass
class Look:
    """One look at a location: the records not there yet, and the names holding something else."""

    missing: list[Name]
    problems: list[tuple[str, str]]  # (name, what is there instead)

    @property
    def bytes_missing(self) -> int:
        return sum(r.size for r in self.missing if isinstance(r, servefile.File))


def look(loc_fd: int, where: str, names: list[Name] | tuple[Name, ...]) -> Look:
    """Look at each of ``names`` in the location ``loc_fd`` (``where`` in messages), never following a
    link: a lstat each, in the directory each name is in."""
    found = Look([], [])
    by_dir: dict[str, list[Name]] = {}
    for record in names:
        by_dir.setdefault(os.path.dirname(record.name), []).append(record)
    for parent, records in by_dir.items():
        try:
            with nodefs.walked(loc_fd, parent.split("/") if parent else [], where) as dir_fd:
                for record in records:
                    why = _judge(record, dir_fd)
                    if why == "nothing there":
                        found.missing.append(record)
                    elif why:
                        found.problems.append((record.name, why))
        except FileNotFoundError:
            found.missing += records
        except nodefs.Planted as planted:
            found.problems += [(r.name, f"under {planted}") for r in records]
    return found


def _judge(record: Name, dir_fd: int) -> str:
    """What is wrong with ``record``'s name in ``dir_fd``: "" when served, "nothing there" when missing."""
    base = os.path.basename(record.name)
    st = nodefs.lstat(dir_fd, base)
    if st is None:
        return "nothing there"
    if isinstance(record, servefile.Link):
        if not stat.S_ISLNK(st.st_mode):
            return f"{nodefs.kind(st.st_mode)}, where a link to {record.target} belongs"
        if os.readlink(base, dir_fd=dir_fd) != record.target:
            return f"a link to somewhere else, where a link to {record.target} belongs"
        return ""
    if not stat.S_ISREG(st.st_mode):
        return f"{nodefs.kind(st.st_mode)}, not a regular file"
    if st.st_size != record.size:
        return f"{st.st_size} bytes, not the baked {record.size}"
    return ""


def look_linked(where: str, records: Records) -> list[tuple[str, str]]:
    """The names of the linked view at ``where`` that do not serve their file: each followed through its
    link (into the image) to a regular file of the baked size. Returns (name, what is there) for each."""
    sizes = {f.name: f.size for f in records.files}
    names = [(f.name, f.size) for f in records.linked()]
    for link in records.links:
        target = servefile.resolve_link(link.name, link.target)
        names.append((link.name, sizes.get(target or "", -1)))
    problems = []
    for name, size in names:
        try:
            st = os.stat(f"{where}/{name}")
        except OSError:
            problems.append((name, "nothing there, or a link to nothing"))
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append((name, f"{nodefs.kind(st.st_mode)}, not a regular file"))
        elif st.st_size != size:
            problems.append((name, f"{st.st_size} bytes, not the baked {size}"))
    return problems

"""The copy into node storage: hashed as it is written, synced once, installed by links that never replace.

Each missing file is copied from the image into this copier's partial in one pass (read, hash,
write, large blocks), checked against the sha256 ``bake.serve`` records, synced once for all the
copies, then hard-linked to its name (``bake.atomic.link_new``): a name already there is left as
it is, and counts as served only when it is a regular file of the baked size that hashes as baked
(a copier beside this one, on a node whose lock did not exclude, installed the same bytes).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bake import atomic, hashes, servefile
from bake.seed import nodefs
from bake.seed.liveness import Beat, Partial
from bake.seed.plan import Name


class TakenOver(Exception):
    """A judge found this copier's partial standing still for the stale bound and removed it."""


class BadCopy(Exception):
    """A copy did not hash to the sha256 bake.serve records: the image's file is not the baked one."""


class MissingSource(Exception):
    """A file bake.serve names is not in the image (a sealed tree with a file deleted)."""


@dataclass
class Copied:
    """What one copier put in place: files and bytes, and the names found holding something else."""

    files: int
    bytes: int
    problems: list[tuple[str, str]]


def copy_in(source: Path, loc_fd: int, where: str, partial: Partial, missing: list[Name]) -> Copied:
    """Copy ``missing`` from the image directory ``source`` into the location ``loc_fd`` (``where``).

    Raises TakenOver, BadCopy, MissingSource, nodefs.Planted, and OSError as a write raises it."""
    files = [r for r in missing if isinstance(r, servefile.File)]
    links = [r for r in missing if isinstance(r, servefile.Link)]
    with Beat(partial) as beat:
        for number, record in enumerate(files):
            fd = _copy_one(source, record, partial, str(number), beat)
            try:
                if len(files) == 1:
                    os.fsync(fd)  # one file: its own fsync, not the whole filesystem's
            finally:
                os.close(fd)
        if len(files) > 1:
            atomic.sync_filesystem(partial.fd)  # many: one sync for them all
        if beat.taken_over.is_set():
            raise TakenOver(beat.stood)
        problems = _install(loc_fd, where, partial, files) + _link(loc_fd, where, links)
    return Copied(len(files), sum(r.size for r in files), problems)


def _copy_one(source: Path, record: servefile.File, partial: Partial, name: str, beat: Beat) -> int:
    """Copy one file into the partial as ``name``, hashing it; returns the copy's open descriptor."""
    try:
        src = os.open(source / record.name, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise MissingSource(f"{source}/{record.name}") from None
    try:
        mode = stat.S_IMODE(os.fstat(src).st_mode)
        dst = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=partial.fd
        )
        base = beat.copied

        def each(done: int) -> None:
            beat.copied = base + done
            if beat.taken_over.is_set():
                raise TakenOver(beat.stood)

        try:
            digest, size = hashes.copy_hashed(src, dst, size=record.size, each=each)
        except BaseException:
            os.close(dst)
            raise
    finally:
        os.close(src)
    if (digest, size) != (record.sha256, record.size):
        os.close(dst)
        raise BadCopy(
            f"a copy of {record.name} hashed sha256 {digest} ({size} bytes), expected {record.sha256} "
            f"({record.size} bytes, bake.serve)"
        )
    return dst


def _by_dir(records: list, where: str, loc_fd: int) -> Iterator[tuple[int, list]]:
    """The records grouped by their directory in the location, each with that directory's descriptor."""
    groups: dict[str, list] = {}
    for number, record in enumerate(records):
        groups.setdefault(os.path.dirname(record.name), []).append((number, record))
    for parent, group in groups.items():
        with nodefs.walked(loc_fd, parent.split("/") if parent else [], where) as dir_fd:
            yield dir_fd, group


def _install(loc_fd: int, where: str, partial: Partial, files: list[servefile.File]) -> list[tuple[str, str]]:
    """Link each copy to its name; a name already there is proved, or reported and left alone."""
    problems = []
    for dir_fd, group in _by_dir(files, where, loc_fd):
        for number, record in group:
            base = os.path.basename(record.name)
            try:
                if atomic.link_new(str(number), base, source_dir=partial.fd, target_dir=dir_fd):
                    continue
            except FileNotFoundError:
                raise TakenOver(0.0) from None  # the partial was taken away under this copier
            why = _proved(dir_fd, base, record, f"{where}/{record.name}")
            if why:
                problems.append((record.name, why))
    return problems


def _proved(dir_fd: int, base: str, record: servefile.File, path: str) -> str:
    """What is wrong with a name another process filled while this one copied: "" when it is a regular
    file of the baked size that hashes as baked (another copier's verified install)."""
    st = nodefs.lstat(dir_fd, base)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != record.size:
        return "something else than the baked file, put there while bake copied" if st else "nothing there"
    try:
        fd = nodefs.open_regular(dir_fd, base, path, os.O_RDONLY)
    except (OSError, nodefs.Planted) as exc:
        return f"a file bake cannot read ({exc})"
    try:
        digest = hashes.sha256_fd(fd)
    finally:
        os.close(fd)
    return (
        "" if digest == record.sha256 else f"a same-size file that hashes sha256 {digest}, not the baked one"
    )


def _link(loc_fd: int, where: str, links: list[servefile.Link]) -> list[tuple[str, str]]:
    """Make each ``link`` record's relative link; one already there must point where the record says."""
    problems = []
    for dir_fd, group in _by_dir(links, where, loc_fd):
        for _, record in group:
            base = os.path.basename(record.name)
            try:
                os.symlink(record.target, base, dir_fd=dir_fd)
            except FileExistsError:
                st = nodefs.lstat(dir_fd, base)
                if (
                    st is None
                    or not stat.S_ISLNK(st.st_mode)
                    or os.readlink(base, dir_fd=dir_fd) != record.target
                ):
                    problems.append((record.name, f"something else than a link to {record.target}"))
    return problems

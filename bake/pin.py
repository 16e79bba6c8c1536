"""``bake pin``: rewrite every reference to a repository in Dockerfiles to one digest-pinned reference.

A reference is the repository as written, bare, tagged, digested or both
(``REPO``, ``REPO:TAG``, ``REPO@sha256:…``, ``REPO:TAG@sha256:…``), where BuildKit takes an
image from: a ``FROM`` image, a ``COPY --from=`` source, a ``RUN --mount=…,from=`` source (each
also behind ``ONBUILD``), an ``ARG`` default. Only those spans change; every other byte of the
file stays as it was: the BOM, line endings, comments, continuation lines, heredoc bodies, and
other repositories that merely share a prefix (``REPO-runtime``, ``REPO/sub``).

The file is read as BuildKit reads it (``bake.dockerfile``); hand-written because no library
parses Dockerfiles back to their exact bytes (BuildKit's parser and dockerfile-parse normalise
continuation lines and drop comments). A file BuildKit would refuse, or might read otherwise,
is refused (exit 2), unchanged.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.dockerfile import Instruction, Span, Unsure, instructions, words
from bake.errors import BakeError, UsageError
from bake.layers import UNIT_TAG

TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
DIGEST = r"sha256:[0-9a-f]{64}"
_ARG_PAIR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# What a quote or an escape may hide inside a value: removed to see what the value names.
_HIDING = str.maketrans("", "", "\"'\\`")


class StalePin(BakeError):
    """``bake pin --check`` found references that are not the pinned one (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Reference:
    """One reference to the repository: where it is (0-based offsets, 1-based line) and its text."""

    start: int
    end: int
    line: int
    seen: str
    # A ``COPY --from=`` source written on one line of its own: a line of the block (see pin_block).
    copy_line: bool = False


def _image_values(instruction: Instruction) -> Iterator[tuple[Span, bool]]:
    """Yield each image name the instruction holds, as BuildKit reads it, and whether it is COPY's."""
    if instruction.keyword == "FROM":
        image = re.match(r"[^\t\v\f\r ]*", instruction.args.text)
        if image and image.group():
            yield instruction.args[: image.end()], False
    for flag in instruction.flags:
        name, _, _ = flag.text.partition("=")
        if instruction.keyword == "COPY" and name == "--from":
            yield flag[len("--from=") :], True
        elif instruction.keyword == "RUN" and name == "--mount":
            yield from ((span, False) for span in _mount_sources(flag[len("--mount=") :], instruction.line))
    if instruction.keyword == "ARG":
        for word in words(instruction.args, instruction.escape):
            if pair := _ARG_PAIR.match(word.text):
                yield _unquoted(word[pair.end() :]), False


def _mount_sources(value: Span, line: int) -> Iterator[Span]:
    """The ``from=`` fields of a ``--mount`` value (a CSV record; its keys are case-insensitive)."""
    if '"' in value.text and "from" in value.text.lower():
        raise Unsure(line, "a --mount value with CSV quotes near a from= field: bake does not rewrite those")
    start = 0
    for field in value.text.split(","):
        key, sep, _ = field.partition("=")
        if sep and key.lower() == "from":
            yield value[start + len(key) + 1 : start + len(field)]
        start += len(field) + 1


def _unquoted(value: Span) -> Span:
    text = value.text
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return value[1:-1]
    return value


def _names(value: str, repository: str) -> bool:
    return value == repository or value.startswith((f"{repository}:", f"{repository}@"))


def find_references(text: str, repository: str, source: str = "<dockerfile>") -> list[Reference]:
    """Return every reference to ``repository`` BuildKit sees in Dockerfile ``text``, in file order.

    Raises UsageError naming ``source`` and the line for a file BuildKit would refuse or bake
    may misread, and for a reference bake cannot rewrite in place: one with a variable, a
    quote, an escape or a malformed tag or digest, or one split across lines.
    """
    exact = re.compile(rf"{re.escape(repository)}(?::{TAG})?(?:@{DIGEST})?")
    starts = [m.start() for m in re.finditer(r"[^\n]*\n|[^\n]+\Z", text)]
    found = []
    try:
        for instruction in instructions(text):
            for value, copy in _image_values(instruction):
                if not _names(value.text.translate(_HIDING), repository):
                    continue  # another image, or a repository that merely shares the prefix
                line = bisect.bisect_right(starts, value.offsets[0])
                if not (_names(value.text, repository) and exact.fullmatch(value.text)):
                    raise UsageError(
                        f"{source}:{line}: {value.text!r} names {repository} but is not "
                        "REPO[:TAG][@sha256:DIGEST] written out; bake pin rewrites only literal "
                        "references: write it as one"
                    )
                if not value.literal():
                    raise UsageError(
                        f"{source}:{line}: the reference {value.text!r} is split across lines; put it "
                        "on one line so bake pin can rewrite it in place"
                    )
                last = instruction.args.offsets[-1] if instruction.args.text else value.offsets[-1]
                one_line = copy and bisect.bisect_right(starts, last) == line == instruction.line
                found.append(Reference(value.offsets[0], value.offsets[-1] + 1, line, value.text, one_line))
    except Unsure as exc:
        raise UsageError(
            f"{source}:{exc.line}: {exc.why}; bake pin edits only a Dockerfile it reads as BuildKit "
            "does, and left this one unchanged: fix that line"
        ) from None
    return sorted(found, key=lambda ref: ref.start)


def pinned_lines(paths: Sequence[Path], repository: str) -> list[tuple[str, str]]:
    """Each reference to ``repository`` already in ``paths``: (``file:line``, the reference as written).

    What ``pin --check --verify-key`` proves signed before it compares. Raises UsageError as
    pin_files does for a file it cannot read or a reference it cannot read.
    """
    found = []
    for path in paths:
        text = _read(path).decode("utf-8", "surrogateescape")
        found += [(f"{path}:{ref.line}", ref.seen) for ref in find_references(text, repository, str(path))]
    return found


def pin_text(text: str, references: Sequence[Reference], pinned: str) -> str:
    """Return ``text`` with each of ``references`` replaced by ``pinned``, every other byte kept."""
    pieces, last = [], 0
    for ref in references:
        pieces += [text[last : ref.start], pinned]
        last = ref.end
    pieces.append(text[last:])
    return "".join(pieces)


@dataclass(frozen=True)
class BlockLine:
    """One line of the block: a unit's name (None for the index) and its pinned reference."""

    unit: str | None
    pinned: str


def line_unit(seen: str, repository: str) -> str | None:
    """The unit a reference names by its tag (``REPO:unit-NAME-KEY``), or None: the index's line."""
    tag = seen[len(repository) :].partition("@")[0].removeprefix(":")
    found = UNIT_TAG.fullmatch(tag)
    return found["name"] if found else None


def _runs(references: Sequence[Reference]) -> list[list[Reference]]:
    """The block lines, grouped into runs of consecutive lines."""
    runs: list[list[Reference]] = []
    for ref in references:
        if not ref.copy_line:
            continue
        if runs and runs[-1][-1].line + 1 == ref.line:
            runs[-1].append(ref)
        else:
            runs.append([ref])
    return runs


def pin_block(
    text: str,
    references: Sequence[Reference],
    repository: str,
    block: Sequence[BlockLine],
    whole: str,
    source: str,
) -> tuple[str, list[str]]:
    """Return ``text`` with its block(s) written from ``block``, and one ``file:line: seen → new`` per change.

    Each run of consecutive one-line ``COPY --from=REPO…`` instructions is a block. A line is a
    unit's by its tag; the one other line is the index's (a bare ``REPO`` placeholder too).
    Unchanged units keep their lines, bytes and order; a changed unit's line keeps its place; a
    unit no longer selected loses its line; a new unit goes after the last unit, before the index,
    which is last. New lines copy the first line's form. Every other reference (``FROM``, ``ARG``,
    ``RUN --mount``) is pinned to ``whole``, the image of the whole tree.
    """
    starts = [m.start() for m in re.finditer(r"[^\n]*\n|[^\n]+\Z", text)] + [len(text)]
    runs = _runs(references)
    in_runs = {id(ref) for run in runs for ref in run}
    edits: list[tuple[int, int, str]] = []
    stale = [
        f"{source}:{ref.line}: {ref.seen} → {whole}"
        for ref in references
        if id(ref) not in in_runs and ref.seen != whole
    ]
    edits += [(ref.start, ref.end, whole) for ref in references if id(ref) not in in_runs]
    for run in runs:
        first, last = starts[run[0].line - 1], starts[run[-1].line]
        lines = [(ref, text[starts[ref.line - 1] : starts[ref.line]]) for ref in run]
        new, changes = _block_lines(lines, starts, repository, block, source)
        edits.append((first, last, "".join(new)))
        stale += changes
    pieces, at = [], 0
    for start, end, replacement in sorted(edits):
        pieces += [text[at:start], replacement]
        at = end
    return "".join(pieces) + text[at:], stale


def _block_lines(
    lines: list[tuple[Reference, str]],
    starts: list[int],
    repository: str,
    block: Sequence[BlockLine],
    source: str,
) -> tuple[list[str], list[str]]:
    """The run's new lines (see pin_block), and a description of each change."""
    # The file's last line may lack its newline: every line gets one here, and the last loses it again.
    ending = "" if lines[-1][1].endswith("\n") else "\n"
    lines = [(ref, line + ending if i == len(lines) - 1 else line) for i, (ref, line) in enumerate(lines)]
    old: dict[str | None, tuple[Reference, str]] = {}
    for ref, line in lines:
        unit = line_unit(ref.seen, repository)
        if unit in old:
            raise UsageError(
                f"{source}:{ref.line}: a second block line for {'unit ' + unit if unit else 'the index'} "
                f"(line {old[unit][0].line} is the first); remove one of them, then rerun bake pin"
            )
        old[unit] = (ref, line)

    def put(ref: Reference, line: str, pinned: str) -> str:
        at = ref.start - starts[ref.line - 1]
        return line[:at] + pinned + line[at + ref.end - ref.start :]

    wanted = {entry.unit: entry.pinned for entry in block}
    new, stale = [], []
    for unit, (ref, line) in old.items():
        if unit is None:
            continue
        if unit in wanted:
            new.append(put(ref, line, wanted[unit]))
            if ref.seen != wanted[unit]:
                stale.append(f"{source}:{ref.line}: {ref.seen} → {wanted[unit]}")
        else:
            stale.append(
                f"{source}:{ref.line}: {ref.seen} → nothing: no such unit in the selection, the line goes"
            )
    template, last = lines[0], lines[-1][0].line
    for entry in block:
        if entry.unit is not None and entry.unit not in old:
            new.append(put(*template, entry.pinned))
            stale.append(f"{source}:{last}: no line for unit {entry.unit} → {entry.pinned}")
    index = old.get(None)
    new.append(put(*(index or template), wanted[None]))
    if index is None or index[0].seen != wanted[None] or index[0].line != last:
        seen = index[0].seen if index else "no index line"
        stale.append(
            f"{source}:{(index or template)[0].line}: {seen} → {wanted[None]} (the block's last line)"
        )
    if ending:
        new[-1] = new[-1][: -len(ending)]
    return new, stale


@dataclass(frozen=True)
class PinnedFile:
    """What ``bake pin`` found in one Dockerfile, and what it changed (``file:line: seen → expected``)."""

    path: Path
    references: tuple[Reference, ...]
    stale: tuple[str, ...]


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _regular(path: Path, mode: int) -> None:
    """Refuse what is not a regular file: a FIFO or a device would block, or answer what it likes."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a device or other special file")
        raise UsageError(f"{path}: not a regular file ({kind}); give the path of a Dockerfile")


def _read(path: Path) -> bytes:
    try:
        _regular(path, os.stat(path).st_mode)
        # O_NONBLOCK: what became a FIFO since the stat opens at once, and is refused by fstat.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            _regular(path, os.fstat(fd).st_mode)
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
        finally:
            os.close(fd)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); give the path of a Dockerfile") from None


def pin_files(
    paths: Sequence[Path],
    repository: str,
    pinned: str,
    *,
    check: bool,
    block: Sequence[BlockLine] | None = None,
) -> list[PinnedFile]:
    """Pin every reference to ``repository`` in ``paths``; return what each file held.

    Without ``block`` every reference becomes ``pinned``. With it, the file's block lines are
    written from it and every other reference becomes ``pinned`` (pin_block). Every file is read
    and checked, and each that changes opened for writing, before any is written, so a bad one
    leaves all as they were. A file is edited in place, as an editor saves: its inode, hard
    links, owner and mode stay, and a symlink's target changes. With ``check`` nothing is
    written, and StalePin (exit 1) names each stale line as ``file:line: seen → expected``.
    Raises UsageError for a file that is not a regular one, cannot be read or written, holds no
    reference to ``repository``, or holds one bake cannot rewrite.
    """
    plans = []
    for path in paths:
        # surrogateescape: bytes that are not UTF-8 come back out exactly as they went in.
        data = _read(path)
        text = data.decode("utf-8", "surrogateescape")
        references = find_references(text, repository, str(path))
        if not references:
            raise UsageError(
                f"{path}: no reference to {repository} (in FROM, COPY --from=, RUN --mount=…,from= or an "
                f"ARG default); add `COPY --link --from={repository} / /` to the stage that needs it, then "
                "rerun bake pin"
            )
        if block is None:
            stale = [f"{path}:{ref.line}: {ref.seen} → {pinned}" for ref in references if ref.seen != pinned]
            new_text = pin_text(text, references, pinned)
        else:
            new_text, stale = pin_block(text, references, repository, block, pinned, str(path))
        new = new_text.encode("utf-8", "surrogateescape")
        plans.append((PinnedFile(path, tuple(references), tuple(stale)), data, new))
    if check:
        lines = [line for p, _, _ in plans for line in p.stale]
        if lines:
            raise StalePin(
                f"{len(lines)} stale line(s) for {repository}; run the same bake pin without --check "
                "and commit the result:\n" + "\n".join(lines)
            )
    else:
        _write_all([(p.path, old, new) for p, old, new in plans if old != new])
    return [p for p, _, _ in plans]


def _write_all(edits: Sequence[tuple[Path, bytes, bytes]]) -> None:
    """Write each file's new bytes in place, all or none: every file is opened for writing before the
    first is written, and a failed write (ENOSPC) puts back the bytes of each file written so far,
    which fit in the blocks the file already had."""
    opened: list[tuple[Path, int, bytes, bytes]] = []
    try:
        for path, old, new in edits:
            opened.append((path, _open_for_edit(path, old), old, new))
        for done, (path, fd, _, new) in enumerate(opened):
            try:
                _overwrite(fd, new)
            except OSError as exc:
                _put_back(opened[: done + 1], path, exc)
    finally:
        for _, fd, _, _ in opened:
            os.close(fd)


def _open_for_edit(path: Path, old: bytes) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(
            f"{path}: cannot write it ({exc.strerror}); no file was changed: make it writable and rerun"
        ) from None
    try:
        _regular(path, os.fstat(fd).st_mode)
        if os.pread(fd, len(old) + 1, 0) != old:
            raise UsageError(f"{path}: it changed while bake pin read it; no file was changed: rerun")
    except (OSError, UsageError):
        os.close(fd)
        raise
    return fd


def _overwrite(fd: int, data: bytes) -> None:
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], written)
    os.ftruncate(fd, len(data))
    os.fsync(fd)


def _put_back(written: Sequence[tuple[Path, int, bytes, bytes]], failed: Path, exc: OSError) -> None:
    """Restore the files already written; raise UsageError saying truthfully what changed."""
    broken = []
    for path, fd, old, _ in written:
        try:
            _overwrite(fd, old)
        except OSError:
            broken.append(str(path))
    outcome = "no file was changed"
    if broken:
        outcome = (
            f"{', '.join(broken)} could not be put back, may be half-written: restore from version control"
        )
    raise UsageError(f"{failed}: cannot write it ({exc.strerror}); {outcome}, then rerun") from None

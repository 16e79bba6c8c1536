"""``bake pin``: rewrite every reference to a repository in Dockerfiles to one digest-pinned reference.

A reference is the repository as written, bare, tagged, digested or both
(``REPO``, ``REPO:TAG``, ``REPO@sha256:…``, ``REPO:TAG@sha256:…``), where Dockerfiles name
images: a ``FROM`` image, a ``COPY --from=`` source, an ``ARG`` default. Only those spans
change; every other byte of the file stays as it was: line endings, comments, continuation
lines, heredoc bodies, and other repositories that merely share a prefix (``REPO-runtime``,
``REPO/sub``).

Hand-written because no library parses Dockerfiles back to their exact bytes: the Dockerfile
parsers (BuildKit's, dockerfile-parse) normalise continuation lines and drop comments, which
would lose the very bytes this must keep. This reads just enough of the grammar (escape
directive, continuation lines, comment lines inside them, heredocs, flags, ARG pairs) to
find the image names, and maps them back to their offsets in the original text.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.atomic import write_file
from bake.errors import BakeError, UsageError

TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
DIGEST = r"sha256:[0-9a-f]{64}"
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")
_ESCAPE_DIRECTIVE = re.compile(r"#\s*escape\s*=\s*(\S)\s*$", re.IGNORECASE)
_DIRECTIVE = re.compile(r"#\s*[A-Za-z_]+\s*=")
_HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_ARG_PAIR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


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


@dataclass(frozen=True)
class _Instruction:
    keyword: str
    text: str  # the logical line: continuation lines joined, comment lines inside them dropped
    offsets: tuple[int, ...]  # offsets[i]: where text[i] sits in the file


def _physical_lines(text: str) -> list[tuple[int, str]]:
    """Return (offset, content without its line ending) for every line of ``text``."""
    lines = []
    for match in _LINE.finditer(text):
        content = match.group().removesuffix("\n").removesuffix("\r")
        lines.append((match.start(), content))
    return lines


def _escape_char(lines: list[tuple[int, str]]) -> str:
    """The escape character: ``\\`` unless an ``# escape=`` parser directive at the top says otherwise."""
    for _, content in lines:
        if not _DIRECTIVE.match(content):
            break
        if found := _ESCAPE_DIRECTIVE.match(content):
            return found.group(1)
    return "\\"


def _is_blank_or_comment(content: str) -> bool:
    stripped = content.strip()
    return not stripped or stripped.startswith("#")


def _instructions(text: str) -> Iterator[_Instruction]:
    """Yield every instruction of a Dockerfile, each with its logical text mapped to file offsets."""
    lines = _physical_lines(text)
    continuation = re.compile(re.escape(_escape_char(lines)) + r"[ \t]*$")
    i = 0
    while i < len(lines):
        if _is_blank_or_comment(lines[i][1]):
            i += 1
            continue
        chars: list[str] = []
        offsets: list[int] = []
        while i < len(lines):
            offset, content = lines[i]
            i += 1
            joined = continuation.search(content)
            piece = content[: joined.start()] if joined else content
            chars.extend(piece)
            offsets.extend(range(offset, offset + len(piece)))
            if not joined:
                break
            while i < len(lines) and _is_blank_or_comment(lines[i][1]):
                i += 1  # Docker drops comment and empty lines inside a continued instruction
        logical = "".join(chars)
        keyword = logical.split(None, 1)[0].upper() if logical.strip() else ""
        yield _Instruction(keyword, logical, tuple(offsets))
        i = _skip_heredocs(logical, keyword, lines, i)


def _skip_heredocs(logical: str, keyword: str, lines: list[tuple[int, str]], i: int) -> int:
    """Return the index of the first line after the heredoc bodies ``logical`` opens (none: ``i``)."""
    if keyword not in ("RUN", "COPY", "ADD"):
        return i
    for strip_tabs, _, word in _HEREDOC.findall(logical):
        while i < len(lines):
            content = lines[i][1]
            i += 1
            if (content.lstrip("\t") if strip_tabs else content) == word:
                break
    return i


def _tokens(text: str) -> Iterator[tuple[int, str]]:
    for match in re.finditer(r"\S+", text):
        yield match.start(), match.group()


def _image_values(instruction: _Instruction) -> Iterator[tuple[int, str]]:
    """Yield (position in the logical text, value) of each image name the instruction holds."""
    tokens = list(_tokens(instruction.text))[1:]
    if instruction.keyword == "FROM":
        image = next(((pos, tok) for pos, tok in tokens if not tok.startswith("--")), None)
        if image is not None:
            yield image
    elif instruction.keyword == "COPY":
        for pos, tok in tokens:
            if tok.startswith("--from="):
                yield _unquoted(pos + len("--from="), tok[len("--from=") :])
    elif instruction.keyword == "ARG":
        for pos, tok in tokens:
            if pair := _ARG_PAIR.match(tok):
                yield _unquoted(pos + pair.end(), tok[pair.end() :])


def _unquoted(pos: int, value: str) -> tuple[int, str]:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return pos + 1, value[1:-1]
    return pos, value


def find_references(text: str, repository: str, source: str = "<dockerfile>") -> list[Reference]:
    """Return every reference to ``repository`` in Dockerfile ``text``, in file order.

    Raises UsageError naming ``source`` and the line for a reference bake cannot rewrite in
    place: one with a variable or a malformed tag or digest, or one split across lines.
    """
    exact = re.compile(rf"{re.escape(repository)}(?::{TAG})?(?:@{DIGEST})?")
    starts = [offset for offset, _ in _physical_lines(text)]
    found = []
    for instruction in _instructions(text):
        for pos, value in _image_values(instruction):
            if not (value == repository or value.startswith((f"{repository}:", f"{repository}@"))):
                continue  # another image, or a repository that merely shares the prefix
            start = instruction.offsets[pos]
            line = bisect.bisect_right(starts, start)
            if not exact.fullmatch(value):
                raise UsageError(
                    f"{source}:{line}: {value!r} names {repository} but is not REPO[:TAG][@sha256:DIGEST] "
                    "written out; bake pin rewrites only literal references: write it as one"
                )
            end = instruction.offsets[pos + len(value) - 1] + 1
            if end - start != len(value):
                raise UsageError(
                    f"{source}:{line}: the reference {value!r} is split across lines; put it on one line "
                    "so bake pin can rewrite it in place"
                )
            found.append(Reference(start, end, line, value))
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
class PinnedFile:
    """What ``bake pin`` found in one Dockerfile, and what it wrote."""

    path: Path
    references: tuple[Reference, ...]
    stale: tuple[Reference, ...]


def _read(path: Path) -> str:
    try:
        # surrogateescape: bytes that are not UTF-8 come back out exactly as they went in.
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); give the path of a Dockerfile") from None


def pin_files(paths: Sequence[Path], repository: str, pinned: str, *, check: bool) -> list[PinnedFile]:
    """Pin every reference to ``repository`` in ``paths`` to ``pinned``; return what each file held.

    Every file is read and checked before any is written, so a bad one leaves all as they were.
    A file is rewritten (atomically, its mode kept, a symlink's target) only where it changes.
    With ``check`` nothing is written, and StalePin (exit 1) names each stale line as
    ``file:line: seen → expected``. Raises UsageError for a file that cannot be read, that
    holds no reference to ``repository``, or holds one bake cannot rewrite.
    """
    plans = []
    for path in paths:
        text = _read(path)
        references = find_references(text, repository, str(path))
        if not references:
            raise UsageError(
                f"{path}: no reference to {repository} (in FROM, COPY --from= or an ARG default); "
                f"add `COPY --link --from={repository} / /` to the stage that needs it, then rerun bake pin"
            )
        stale = tuple(ref for ref in references if ref.seen != pinned)
        plans.append((path, text, PinnedFile(path, tuple(references), stale)))
    if check:
        lines = [f"{p.path}:{ref.line}: {ref.seen} → {pinned}" for _, _, p in plans for ref in p.stale]
        if lines:
            raise StalePin(
                f"{len(lines)} stale reference(s) to {repository}; run the same bake pin without --check "
                "and commit the result:\n" + "\n".join(lines)
            )
        return [p for _, _, p in plans]
    for path, text, plan in plans:
        if plan.stale:
            _write(path, pin_text(text, plan.references, pinned))
    return [p for _, _, p in plans]


def _write(path: Path, text: str) -> None:
    target = path.resolve()  # a symlinked Dockerfile: its target changes, the link stays
    try:
        mode = os.stat(target).st_mode & 0o7777
        write_file(target, text.encode("utf-8", "surrogateescape"), mode=mode)
    except OSError as exc:
        raise UsageError(
            f"{path}: cannot write it ({exc.strerror}); the file is unchanged: make it writable and rerun"
        ) from None

""".dockerignore, as moby/patternmatcher reads and matches it (the code BuildKit uses)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.errors import UsageError


@dataclass(frozen=True)
class Pattern:
    """One line of a .dockerignore, compiled the way patternmatcher compiles it."""

    text: str
    negated: bool  # a `!` line: it re-includes what earlier lines excluded
    kind: str  # exact, prefix, suffix or regexp, as patternmatcher picks it
    regex: re.Pattern[str] | None

    def match(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.text
        if self.kind == "prefix":
            return path.startswith(self.text[:-2])
        if self.kind == "suffix":
            suffix = self.text[2:]
            return path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
        assert self.regex is not None
        return self.regex.match(path) is not None


def read_patterns(path: Path) -> list[Pattern]:
    """Return the patterns of the .dockerignore at PATH (none when it is missing). Raises UsageError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); fix its permissions") from exc
    patterns = []
    lines = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape").split("\n")
    for number, line in enumerate(lines, 1):
        if line.startswith("#"):
            continue
        text = line.strip()
        negated = text.startswith("!")
        if negated:
            text = text[1:].strip()
        if not text:
            if negated:
                raise UsageError(f"{path}:{number}: a lone `!` excludes nothing; remove the line")
            continue
        text = posixpath.normpath(text)
        if text.startswith("//"):
            text = "/" + text.lstrip("/")
        if len(text) > 1 and text.startswith("/"):
            text = text[1:]
        patterns.append(_compile(text, negated, f"{path}:{number}"))
    return patterns


def _compile(text: str, negated: bool, where: str) -> Pattern:
    regex, kind, i = "^", "exact", 0
    first = True
    while i < len(text):
        ch = text[i]
        i += 1
        if ch == "*" and text[i : i + 1] == "*":
            i += 1
            if text[i : i + 1] == "/":
                i += 1
            if i == len(text):
                if kind == "exact":
                    kind = "prefix"
                else:
                    regex, kind = regex + ".*", "regexp"
            else:
                regex, kind = regex + "(.*/)?", "regexp"
            if first:
                kind = "suffix"
        elif ch == "*":
            regex, kind = regex + "[^/]*", "regexp"
        elif ch == "?":
            regex, kind = regex + "[^/]", "regexp"
        elif ch in ".+()|{}$":
            regex += "\\" + ch
        elif ch == "\\":
            if i < len(text):
                regex, kind = regex + "\\" + text[i], "regexp"
                i += 1
            else:
                regex += "\\"
        elif ch in "[]":
            regex, kind = regex + ch, "regexp"
        else:
            regex += ch
        first = False
    compiled = None
    if kind == "regexp":
        try:
            compiled = re.compile(regex + r"\Z")
        except re.error as exc:
            raise UsageError(f"{where}: bad pattern {text!r} ({exc}); fix the .dockerignore line") from exc
    return Pattern(text, negated, kind, compiled)


def excluded(patterns: Sequence[Pattern], path: str) -> bool:
    """Return whether PATH (relative, '/'-separated) is excluded; a pattern on a parent excludes it too."""
    parts = path.split("/")
    parents = ["/".join(parts[:n]) for n in range(1, len(parts))]
    excluded = False
    for pattern in patterns:
        # A plain line can only exclude an included path, a `!` line only re-include an excluded one.
        if pattern.negated != excluded:
            continue
        if pattern.match(path) or any(pattern.match(p) for p in parents):
            excluded = not pattern.negated
    return excluded

"""A Dockerfile read the way BuildKit's parser reads it: its instructions, mapped back to file offsets.

The rules are those of moby/buildkit v0.13's ``frontend/dockerfile/parser`` (the frontend built
into Docker Engine 26.1), ported where the image names depend on them:

- ``parser.go`` ``Parse``: lines end at ``\\n``, lose every trailing ``\\r``/``\\n`` and (top
  level) their leading white space; a UTF-8 BOM is dropped from line 1 only; a line that is a
  comment after that is skipped, as are comment and blank lines inside a continued
  instruction; a line continues when it ends in the escape character (blanks after it
  allowed) that does not itself follow an escape character.
- ``directives.go``: parser directives (``# escape=``, ``# syntax=``) stand before anything
  else, each once; the first line that is not one ends them. An escape other than ``\\`` or
  `````` is an error.
- ``parser.go`` ``heredocsFromLine``: after RUN, COPY and ADD (also behind ONBUILD) in shell
  form, each word of the instruction as ``shell/lex.go`` splits it (raw quotes and escapes,
  no variable set) that is ``[digits]<<[-]NAME`` opens a heredoc whose body is the following
  lines up to one that is exactly NAME (quotes removed from NAME; leading tabs ignored with
  ``<<-``). So ``echo '<<EOF'``, ``x<<EOF`` and ``$((1<<N))`` open none, and a NAME may hold
  any character but ``<``.
- ``split_command.go``: the instruction word, then leading ``--flag`` words (quotes and ``\\``
  escapes removed), then the arguments.

Where this reading and BuildKit's could part (a Dockerfile BuildKit refuses, a lexer error, a
variable substitution with an operator next to a ``<<``), ``Unsure`` is raised, so that no
caller edits a file it may have misread.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

BOM = "\ufeff"
# bufio.Scanner's limit: BuildKit refuses a longer line.
MAX_LINE = 64 * 1024 - 1
_DIRECTIVE = re.compile(r"#[\t\n\f\r ]*([a-zA-Z][a-zA-Z0-9]*)[\t\n\f\r ]*=[\t\n\f\r ]*(.+?)[\t\n\f\r ]*\Z")
_DIRECTIVES = ("syntax", "escape")
_WHITESPACE = re.compile(r"[\t\v\f\r ]+")
_HEREDOC = re.compile(r"([0-9]*)<<(-?)([^<]*)\Z", re.DOTALL)
_HEREDOC_KEYWORDS = ("RUN", "COPY", "ADD")
# The instructions whose arguments BuildKit tries as a JSON array (parseMaybeJSON, parseMaybeJSONToList).
_JSON_KEYWORDS = ("ADD", "CMD", "COPY", "ENTRYPOINT", "RUN", "SHELL", "VOLUME")
_SPECIAL_PARAMS = "@*#?-$!0"


class Unsure(Exception):
    """BuildKit would refuse this Dockerfile, or may read it otherwise than this module: ``line`` and why."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line
        self.why = why


def go_space(ch: str) -> bool:
    """Go's unicode.IsSpace, which BuildKit trims with (Python's isspace adds U+001C..U+001F)."""
    return ch.isspace() and ch not in "\x1c\x1d\x1e\x1f"


@dataclass(frozen=True)
class Span:
    """Text BuildKit reads, with ``offsets[i]``: where ``text[i]`` sits in the file."""

    text: str
    offsets: tuple[int, ...]

    def __getitem__(self, key: slice) -> Span:
        return Span(self.text[key], self.offsets[key])

    def strip(self) -> Span:
        start, end = 0, len(self.text)
        while start < end and go_space(self.text[start]):
            start += 1
        while end > start and go_space(self.text[end - 1]):
            end -= 1
        return self[start:end]

    def literal(self) -> bool:
        """True when the text is the file's bytes as they stand: one line, nothing removed between."""
        return all(b == a + 1 for a, b in zip(self.offsets, self.offsets[1:], strict=False))


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword (upper case), flags (each ``name=value`` Span) and arguments."""

    keyword: str
    flags: tuple[Span, ...]
    args: Span
    line: int  # 1-based, where it starts
    escape: str  # the escape character in force (ARG's words honour it)
    inner: Instruction | None = None  # what ONBUILD wraps


_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")
_SYNTAX = re.compile(
    r"(?:docker\.io/)?docker/dockerfile(?:-upstream)?:1(?:\.([0-9]+)(?:\.[0-9]+)?)?(?:-labs)?(?:@sha256:[0-9a-f]{64})?"
)


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset, content) of each line: scanLines, then trimNewline. Raises Unsure past BuildKit's limit."""
    lines = []
    for number, piece in enumerate(_LINE.finditer(text), 1):
        if len(piece.group().encode("utf-8", "surrogateescape")) > MAX_LINE + 1:
            raise Unsure(number, f"a line longer than {MAX_LINE} bytes, which BuildKit refuses")
        lines.append((piece.start(), piece.group().rstrip("\r\n")))
    return lines


def _lstrip(span: Span) -> Span:
    return span[len(span.text) - len(_lstrip_text(span.text)) :]


def _lstrip_text(text: str) -> str:
    """bytes.TrimLeftFunc(text, unicode.IsSpace)."""
    start = 0
    while start < len(text) and go_space(text[start]):
        start += 1
    return text[start:]


class _Directives:
    """The parser directives at the top of the file, and the escape character they set."""

    def __init__(self) -> None:
        self.escape = "\\"
        self.done = False
        self.seen: set[str] = set()

    def read(self, token: str, number: int) -> None:
        if self.done:
            return
        found = _DIRECTIVE.match(token)
        key = found.group(1).lower() if found else ""
        if key not in _DIRECTIVES:
            self.done = True
            return
        if key in self.seen:
            raise Unsure(number, f"a second {key} parser directive, which BuildKit refuses")
        self.seen.add(key)
        value = found.group(2)
        if key == "escape" and value not in ("\\", "`"):
            raise Unsure(number, f"escape={value}: BuildKit takes only \\ or ` as the escape character")
        if key == "escape":
            self.escape = value

    def continued(self, span: Span) -> tuple[Span, bool]:
        """trimContinuationCharacter: the line without its final escape and blanks; whether it continues."""
        found = re.search(rf"(?<!{re.escape(self.escape)}){re.escape(self.escape)}[ \t]*\Z", span.text)
        return (span[: found.start()], True) if found else (span, False)


def _check_frontend(lines: list[tuple[int, str]]) -> None:
    """DetectSyntax: the frontend a ``# syntax=`` (or ``// syntax=``) directive picks, a shebang line
    skipped, must read Dockerfiles as v0.13 does (docker/dockerfile 1.4 and later). Frontends
    from 1.8 read a ``check`` directive and go on; v0.13 stops there: an escape after it is refused."""
    contents = [content for _, content in lines]
    if contents and contents[0].startswith(BOM):
        contents[0] = contents[0][1:]
    start = 1 if contents and contents[0].startswith("#!") else 0
    for prefix in ("#", "//"):
        checked = syntax = False
        for number, content in enumerate(contents[start:], start + 1):
            found = _DIRECTIVE.match("#" + content[len(prefix) :]) if content.startswith(prefix) else None
            key = found.group(1).lower() if found else ""
            if key not in (*_DIRECTIVES, "check"):
                break
            if key == "escape" and checked and prefix == "#":
                raise Unsure(number, "an escape directive after a check directive: frontends disagree on it")
            checked = checked or key == "check"
            if key == "syntax":
                syntax = True
                version = _SYNTAX.fullmatch(found.group(2))
                if not version or int(version.group(1) or 4) < 4:
                    raise Unsure(
                        number,
                        f"syntax={found.group(2)}: a Dockerfile frontend whose rules bake does not know",
                    )
        if syntax:
            return


def instructions(text: str) -> Iterator[Instruction]:
    """Yield each instruction BuildKit reads in Dockerfile ``text`` (ONBUILD's: the one it wraps).

    Heredoc bodies are skipped as BuildKit skips them. Raises Unsure (see the module docstring).
    """
    lines = _lines(text)
    _check_frontend(lines)
    directives = _Directives()
    i = 0
    while i < len(lines):
        offset, content = lines[i]
        number, i = i + 1, i + 1
        if number == 1 and content.startswith(BOM):
            offset, content = offset + 1, content[1:]
        first = _lstrip(Span(content, tuple(range(offset, offset + len(content)))))
        directives.read(first.text, number)
        if first.text.startswith("#"):
            continue
        line, more = directives.continued(first)
        if not more and not line.text:
            continue
        pieces = [line]
        while more and i < len(lines):
            offset, content = lines[i]
            i += 1
            if _lstrip_text(content)[:1] in ("", "#"):
                continue  # comment and empty lines inside a continued instruction
            piece, more = directives.continued(Span(content, tuple(range(offset, offset + len(content)))))
            pieces.append(piece)
        whole = Span("".join(p.text for p in pieces), tuple(o for p in pieces for o in p.offsets))
        instruction = split(whole, number, directives.escape)
        i = _skip_heredocs(lines, i, whole.text, instruction, number)
        yield instruction.inner or instruction


def _skip_heredocs(
    lines: list[tuple[int, str]], i: int, text: str, instruction: Instruction, number: int
) -> int:
    """Return the index of the first line after the heredoc bodies the instruction opens."""
    target = instruction.inner or instruction
    if target.keyword not in _HEREDOC_KEYWORDS or _json_form(target, number):
        return i
    if "<<" in text and ("\ufeff" in text or any("\udc80" <= ch <= "\udcff" for ch in text)):
        raise Unsure(
            number, "a BOM or bytes that are not UTF-8 beside a <<: BuildKit's lexer reads them otherwise"
        )
    try:
        words = _Lexer(text, raw_quotes=True, raw_escapes=True).words()
    except _LexError:
        words = []  # heredocsFromLine ignores the lexer's error: no heredoc
    for word in words:
        opened = _heredoc(word, number)
        if opened is None:
            continue
        name, chomp = opened
        while True:
            if i >= len(lines):
                raise Unsure(number, f"an unterminated heredoc (<<{name}), which BuildKit refuses")
            content = lines[i][1]
            i += 1
            if (content.lstrip("\t") if chomp else content) == name:
                break
    return i


def _heredoc(word: str, number: int) -> tuple[str, bool] | None:
    """heredocFromMatch: (NAME, chomp) when ``word`` opens a heredoc."""
    found = _HEREDOC.match(word)
    if not found or not found.group(3):
        return None
    try:
        names = _Lexer(found.group(3), raw_quotes=False, raw_escapes=False).words()
        raw = _Lexer(found.group(3), raw_quotes=True, raw_escapes=False).words()
    except _LexError:
        raise Unsure(
            number, f"{word!r}: a heredoc word BuildKit cannot read, so it refuses the file"
        ) from None
    if len(names) != 1:
        return None
    if len(raw) != 1:
        raise Unsure(number, f"{word!r}: BuildKit reads this heredoc word inconsistently and refuses it")
    return names[0], found.group(2) == "-"


def _json_form(instruction: Instruction, number: int) -> bool:
    """parseJSON: True for arguments that are a JSON array of strings (no heredocs then)."""
    rest = _lstrip(instruction.args).text
    if instruction.keyword not in _JSON_KEYWORDS or not rest.startswith("["):
        return False
    try:
        value = json.loads(rest, parse_constant=_not_json)
    except ValueError:
        return False
    if not isinstance(value, list):
        return False
    if not all(isinstance(item, str) for item in value):
        raise Unsure(number, "a JSON array that is not all strings, which BuildKit refuses")
    return True


def _not_json(name: str) -> None:
    raise ValueError(name)  # Go's encoding/json has no NaN or Infinity


def split(line: Span, number: int, escape: str) -> Instruction:
    """splitCommand: the keyword, the leading ``--`` flags and the arguments (ONBUILD's wrapped one too)."""
    whole = line.strip()
    gap = _WHITESPACE.search(whole.text)
    if gap is None:
        return Instruction(whole.text.upper(), (), whole[len(whole.text) :], number, escape)
    keyword = whole.text[: gap.start()].upper()
    flags, args = _flags(whole[gap.end() :], number)
    inner = split(args.strip(), number, escape) if keyword == "ONBUILD" and args.strip().text else None
    return Instruction(keyword, flags, args.strip(), number, escape, inner)


_SPACES, _WORD, _QUOTE = range(3)


def _flags(rest: Span, number: int) -> tuple[tuple[Span, ...], Span]:
    """extractBuilderFlags: each leading ``--NAME=VALUE`` word (``NAME=VALUE``, unquoted) and what follows."""
    text, words = rest.text, []
    chars: list[str] = []
    offsets: list[int] = []
    phase, quote, blank_ok, pos = _SPACES, "", False, 0
    while pos <= len(text):
        ch = text[pos] if pos < len(text) else ""
        if phase == _SPACES:
            if pos == len(text):
                break
            if ch.isascii() and go_space(ch):  # byte by byte: no byte of a longer character is a space there
                pos += 1
                continue
            if not text.startswith("--", pos):
                return tuple(words), rest[pos:]
            phase = _WORD
        if pos == len(text):
            if "".join(chars) != "--" and (blank_ok or chars):
                words.append(Span("".join(chars), tuple(offsets)))
            break
        if not ch.isascii():
            raise Unsure(
                number, "a flag with a character that is not ASCII: BuildKit reads flags byte by byte"
            )
        if phase == _WORD and go_space(ch):
            if "".join(chars) == "--":
                return tuple(words), rest[pos:]
            if blank_ok or chars:
                words.append(Span("".join(chars), tuple(offsets)))
            phase, blank_ok, chars, offsets = _SPACES, False, [], []
        elif phase == _WORD and ch in "'\"":
            phase, quote, blank_ok = _QUOTE, ch, True
        elif phase == _QUOTE and ch == quote:
            phase = _WORD
        elif ch == "\\" and pos + 1 == len(text):
            phase = _WORD  # a final backslash is dropped
        else:
            if ch == "\\":
                pos += 1
            chars.append(text[pos])
            offsets.append(rest.offsets[pos])
        pos += 1
    return tuple(words), rest[len(text) :]


def words(args: Span, escape: str) -> list[Span]:
    """parseWords (ARG's arguments): words split at white space outside quotes, quotes and escapes kept."""
    found, start, quote, pos, text = [], -1, "", 0, args.text
    while pos < len(text):
        ch = text[pos]
        if start < 0 and go_space(ch):
            pos += 1
            continue
        if start < 0:
            start = pos
        if not quote and go_space(ch):
            found.append(args[start:pos])
            start = -1
        elif not quote and ch in "'\"":
            quote = ch
        elif quote and ch == quote:
            quote = ""
        if ch == escape and quote != "'" and start >= 0:
            pos += 1  # the escaped character stays in the word, whatever it is
        pos += 1
    if start >= 0:
        found.append(args[start : min(pos, len(text))])
    return found


class _LexError(Exception):
    """shell/lex.go would fail on this text."""


class _Words:
    """lex.go's wordsStruct: words split at white space, except text added raw."""

    def __init__(self) -> None:
        self.word, self.words, self.in_word = "", [], False

    def add_char(self, ch: str) -> None:
        if go_space(ch) and self.in_word:
            if self.word:
                self.words.append(self.word)
                self.word, self.in_word = "", False
        elif not go_space(ch):
            self.add_raw(ch)

    def add_raw(self, text: str) -> None:
        self.word += text
        self.in_word = True

    def get(self) -> list[str]:
        if self.word:
            self.words.append(self.word)
            self.word, self.in_word = "", False
        return self.words


class _Lexer:
    """shell/lex.go's ProcessWords with escape ``\\``, no variable set and SkipUnsetEnv, as the heredoc
    code calls it: ``$NAME`` and ``${…}`` stay as written, quotes (``raw_quotes``) and escapes
    (``raw_escapes``) stay in the words or are removed."""

    def __init__(self, text: str, *, raw_quotes: bool, raw_escapes: bool) -> None:
        self.text, self.pos, self.raw_quotes, self.raw_escapes = text, 0, raw_quotes, raw_escapes

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def next(self) -> str:
        ch = self.peek()
        self.pos += 1 if ch else 0
        return ch

    def words(self) -> list[str]:
        return self.stop_on("", self.raw_escapes)[1]

    def stop_on(self, stop: str, raw_escapes: bool) -> tuple[str, list[str]]:
        """processStopOn: the text up to ``stop`` (or the end, for ""), and its words."""
        saved, self.raw_escapes = self.raw_escapes, raw_escapes
        try:
            return self._stop_on(stop)
        finally:
            self.raw_escapes = saved

    def _stop_on(self, stop: str) -> tuple[str, list[str]]:
        result, words = [], _Words()
        while self.peek():
            ch = self.peek()
            if stop and ch == stop:
                self.next()
                return "".join(result), words.get()
            if ch in "$'\"":
                part = self.dollar() if ch == "$" else self.quoted(ch)
                result.append(part)
                for c in part if ch == "$" else ():
                    words.add_char(c)
                if ch != "$":
                    words.add_raw(part)
                continue
            ch = self.next()
            if ch == "\\":
                if self.raw_escapes:
                    words.add_raw(ch)
                    result.append(ch)
                ch = self.next()
                if not ch:
                    break
                words.add_raw(ch)
            else:
                words.add_char(ch)
            result.append(ch)
        if stop:
            raise _LexError(f"no closing {stop}")
        return "".join(result), words.get()

    def quoted(self, quote: str) -> str:
        """processSingleQuote, processDoubleQuote."""
        opening = self.next()
        result = [opening] if self.raw_quotes else []
        while True:
            ch = self.peek()
            if not ch:
                raise _LexError(f"no closing {quote}")
            if ch == quote:
                self.next()
                return "".join(result + ([ch] if self.raw_quotes else []))
            if quote == '"' and ch == "$":
                result.append(self.dollar())
                continue
            ch = self.next()
            if quote == '"' and ch == "\\":
                if self.raw_escapes:
                    result.append(ch)
                if not self.peek():
                    continue
                if self.peek() in '"$\\':
                    ch = self.next()
            result.append(ch)

    def dollar(self) -> str:
        """processDollar, for a variable that is never set: the substitution as written."""
        self.next()
        if self.peek() != "{":
            return "$" + self.name()
        self.next()
        if not self.peek() or self.peek() in "{}:":
            raise _LexError("bad substitution")
        name = self.name()
        op = self.next()
        if op == "}":
            return "${" + name + "}"
        if op == ":":
            ch = self.next()
            word = self.stop_on("}", ch in "#%")[0]
            return "${" + name + op + ch + word + "}"
        if op and op in "+-?#%":
            return "${" + name + op + self.stop_on("}", op in "#%")[0] + "}"
        if op == "/":
            if self.peek() == "/":
                self.next()
            pattern = self.stop_on("/", True)[0]
            return "${" + name + "/" + pattern + "/" + self.stop_on("}", True)[0] + "}"
        raise _LexError(f"unsupported modifier {op!r}")

    def name(self) -> str:
        """processName: digits, one special parameter, or letters, digits and _."""
        ch = self.peek()
        if ch and unicodedata.category(ch) == "Nd":
            start = self.pos
            while self.peek() and unicodedata.category(self.peek()) == "Nd":
                self.next()
            return self.text[start : self.pos]
        if ch and ch in _SPECIAL_PARAMS:
            return self.next()
        start = self.pos
        while self.peek() and _letter_or_digit(self.peek()):
            self.next()
        return self.text[start : self.pos]


def _letter_or_digit(ch: str) -> bool:
    """unicode.IsLetter or unicode.IsDigit, or _."""
    category = unicodedata.category(ch)
    return category[0] == "L" or category == "Nd" or ch == "_"

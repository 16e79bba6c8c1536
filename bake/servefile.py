"""``bake.serve`` v1 (docs/SERVE_FORMAT.md): its records, the writer ``seal`` uses, and a reader.

The entrypoint reads the same text with ``read`` and awk; the rules below are the
ones it applies, line for line, so that a record either side refuses the other
refuses too (tests/test_servefile.py runs one table through both).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from bake.hashes import SHA256_HEX
from bake.paths import parents

NAME = "bake.serve"
HEADER = "# bake serve v1"
MAX_FIELD = 1024
MAX_LINE = 4096

_ID = re.compile(r"[A-Za-z0-9_.-]+")
_CONSUMER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What a shell (bash, dash, busybox ash), the dynamic loader, libc or an interpreter reads to decide what
# runs, or where (NAME*: a prefix), in the order messages name them: tests/test_servefile.py names the
# manual that says so for each. The entrypoint's _load_loc spells it again in sh; that test checks that
# both refuse each, and that the sh pattern is this table.
REFUSED = (
    "PATH", "IFS", "ENV", "BASH_*", "BASHOPTS", "SHELLOPTS", "POSIXLY_CORRECT", "EXECIGNORE", "GLOBIGNORE",
    "FUNCNEST", "FCEDIT", "PROMPT_COMMAND", "PS0", "PS1", "PS2", "PS3", "PS4", "OPTIND", "TMOUT", "CDPATH",
    "PWD", "OLDPWD", "HOME", "SHELL", "_", "TMPDIR", "LD_*", "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES",
    "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MUSL_LOCPATH", "MALLOC_*", "NIS_PATH", "NLSPATH",
    "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR", "PYTHON*", "PERL5*", "RUBY*", "NODE_*",
    "JAVA_TOOL_OPTIONS", "BAKE_*",
)  # fmt: skip
REFUSED_VARS = tuple(v for v in REFUSED if not v.endswith("*"))
REFUSED_PREFIXES = tuple(v[:-1] for v in REFUSED if v.endswith("*"))
REFUSED_TEXT = ", ".join(REFUSED[:-1]) + " and " + REFUSED[-1]
VIEWS = ("both", "copied")
HOWS = ("tree", "link", "copy")


def refused_var(name: str) -> bool:
    """True for a variable bake may never serve: one that decides what runs, or where."""
    return name in REFUSED_VARS or name.startswith(REFUSED_PREFIXES)


def plain(path: str) -> bool:
    """True for relative path components, none empty, ``.`` or ``..``: a path that cannot leave its root."""
    return bool(path) and all(part not in ("", ".", "..") for part in path.split("/"))


@dataclass(frozen=True)
class Loc:
    """A place a consumer looks: ``$VAR`` (export) or ``${VAR:-FALLBACK}/SUB`` (under)."""

    id: str
    consumer: str
    mode: str
    var: str
    sub: str = ""
    fallback: str = ""


@dataclass(frozen=True)
class ServedSet:
    """What one consumer serves at each of its locations: its stamp's name, its size, where bake's
    own state sits in a location, the asset directory the copied view mirrors, and the ready line's words."""

    consumer: str
    digest: str
    bytes: int
    state: str
    root: str
    shown: str


@dataclass(frozen=True)
class Dir:
    """A directory of a consumer's served tree, made in both views or in the copied one only."""

    consumer: str
    view: str
    path: str


@dataclass(frozen=True)
class Place:
    """How the linked view puts SOURCE (in the asset directory) at DEST: a tree, one link, or a copy."""

    consumer: str
    how: str
    source: str
    dest: str


@dataclass(frozen=True)
class Skip:
    """A name a tree placement brings along that is not served (an alias link beside the files)."""

    consumer: str
    name: str


@dataclass(frozen=True)
class File:
    """A baked file at NAME in the location: its size and sha256, in both views or the copied one."""

    consumer: str
    view: str
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Link:
    """A relative link at NAME in the location, to a file record's name."""

    consumer: str
    name: str
    target: str


Record = Loc | ServedSet | Dir | Place | Skip | File | Link
KINDS: dict[str, type] = {
    "loc": Loc, "set": ServedSet, "dir": Dir, "place": Place, "skip": Skip, "file": File, "link": Link,
}  # fmt: skip
_KIND_OF = {cls: kind for kind, cls in KINDS.items()}
# Records the entrypoint reads itself on every start, before the first per-file record.
HEAD_KINDS = ("loc", "set", "dir", "place", "skip")


_FIELD_NAMES = {cls: tuple(f.name for f in fields(cls)) for cls in KINDS.values()}
# Which fields of each kind are numbers (their annotations are strings: postponed evaluation).
_INT_FIELDS = {cls: tuple(f.type in (int, "int") for f in fields(cls)) for cls in KINDS.values()}


def fields_of(record: Record) -> list[str]:
    """The record's line fields, kind first."""
    return [_KIND_OF[type(record)], *(str(getattr(record, name)) for name in _FIELD_NAMES[type(record)])]


def line(record: Record) -> str:
    """The record as one line of the file, without its line feed."""
    return "\t".join(fields_of(record))


def _ordered(records: Iterable[Record]) -> list[Record]:
    """Records in the file's order: ``loc`` as given (a chained FALLBACK after what it names), then
    each other kind's section, sorted by its fields byte by byte."""
    sections: dict[str, list[tuple[list[bytes], Record]]] = {kind: [] for kind in KINDS}
    for record in records:
        line_fields = fields_of(record)
        sections[line_fields[0]].append(([f.encode() for f in line_fields[1:]], record))
    ordered = [record for _, record in sections["loc"]]
    for kind in ("set", "dir", "place", "skip", "file", "link"):
        ordered += [record for _, record in sorted(sections[kind], key=lambda pair: pair[0])]
    return ordered


def write(records: Iterable[Record]) -> str:
    """Return ``bake.serve`` for ``records``: the header, then each kind's section.

    Raises ValueError naming the record when the reader would refuse it.
    """
    ordered = _ordered(records)
    text = HEADER + "\n" + "".join(line(r) + "\n" for r in ordered)
    refusals = read(text).refused
    if refusals:
        number, reason = refusals[0]
        raise ValueError(f"{NAME}: record {ordered[number - 2]!r} would be refused: expected {reason}")
    return text


def served_set(consumer: str, state: str, root: str, shown: str, parts: Iterable[Record]) -> ServedSet:
    """The ``set`` record of a consumer whose other records are ``parts``: DIGEST names them all, BYTES
    is what the copied view holds."""
    ordered = _ordered(parts)
    h = hashlib.sha256()
    for record in ordered:
        h.update(line(record).encode() + b"\n")
    size = sum(r.size for r in ordered if isinstance(r, File))
    return ServedSet(consumer, h.hexdigest(), size, state, root, shown)


# Up to this many files a consumer's linked view is placed file by file: one `ln` per directory
# costs less than a `cp -rsT` that walks the tree (and an `rm` of the alias links it also makes).
FEW_FILES = 16


def tree_records(consumer: str, root: str, files: Sequence[File], skips: Iterable[str] = ()) -> list[Record]:
    """The records of a consumer whose location mirrors ``root`` (its asset directory) file for file.

    The linked view places ``root`` whole (one ``cp -rsT``) and removes ``skips`` (alias links
    beside the files), or, for a few files, links each one; every directory is in both views.
    """
    dirs = {"."} | {d for f in files for d in parents(f.name)}
    if len(files) <= FEW_FILES:
        places: list[Record] = [Place(consumer, "link", f"{root}/{f.name}", f.name) for f in files]
    else:
        places = [Place(consumer, "tree", root, "."), *(Skip(consumer, name) for name in skips)]
    return [*(Dir(consumer, "both", d) for d in dirs), *places, *files]


def shown(names: Iterable[str], most: int = 8) -> str:
    """The ready line's words for what a consumer serves: the first ``most`` names, and how many more."""
    unique = list(dict.fromkeys(names))
    text = ", ".join(unique[:most])
    if len(unique) > most:
        text += f" and {len(unique) - most} more"
    return text if len(text.encode()) <= MAX_FIELD else f"{len(unique)} files"


@dataclass
class Reading:
    """What ``read`` found: the records it accepted and, per refused line, its number and the rule."""

    records: list[Record]
    refused: list[tuple[int, str]]


class _Reader:
    """One pass over the lines, with the state the rules need (IDs, consumers, names seen)."""

    def __init__(self) -> None:
        self.reading = Reading([], [])
        self.loc_ids: set[str] = set()
        self.loc_consumers: set[str] = set()
        self.sets: set[str] = set()
        self.names: set[tuple[str, str]] = set()
        self.files: set[tuple[str, str]] = set()
        self.in_tail = False

    def check(self, kind: str, f: list[str]) -> str | None:
        """Return the rule ``f`` (the fields after the kind) breaks, or None."""
        if kind not in KINDS:
            return f"a loc, set, dir, place, skip, file or link record, saw kind '{kind}'"
        want = len(_FIELD_NAMES[KINDS[kind]])
        if len(f) != want:
            return f"{want + 1} tab-separated fields, saw {len(f) + 1}"
        if any(len(v.encode()) > MAX_FIELD for v in f):
            return f"fields of at most {MAX_FIELD} bytes"
        if kind in HEAD_KINDS and self.in_tail:
            return f"a {kind} record before the first file or link record"
        if kind == "loc":
            return self.check_loc(*f)
        if kind == "set":
            return self.check_set(*f)
        if f[0] not in self.sets:
            return f"a CONSUMER with a set record above, saw '{f[0]}'"
        return getattr(self, f"check_{kind}")(*f)

    def check_loc(self, id_: str, consumer: str, mode: str, var: str, sub: str, fallback: str) -> str | None:
        if not _ID.fullmatch(id_):
            return f"an ID of letters, digits, _ . -, saw '{id_}'"
        if id_ in self.loc_ids:
            return f"one loc line per ID, saw '{id_}' twice"
        if consumer != "-" and not _CONSUMER.fullmatch(consumer):
            return f"a CONSUMER name or -, saw '{consumer}'"
        if not _VAR.fullmatch(var) or refused_var(var):
            return f"a variable name other than {REFUSED_TEXT}, saw '{var}'"
        if sub and not plain(sub):
            return f"SUB as plain relative components, saw '{sub}'"
        if mode == "export" and not sub and not fallback:
            pass
        elif mode != "under" or not _fallback_ok(fallback, self.loc_ids):
            return (
                "MODE export with no SUB or FALLBACK, or under with /PATH, $HOME[/PATH] or an earlier @ID, "
                f"saw '{mode}', '{sub}' and '{fallback}'"
            )
        self.loc_ids.add(id_)
        self.loc_consumers.add(consumer)
        return None

    def check_set(self, consumer: str, dig: str, size: str, state: str, root: str, shown: str) -> str | None:
        if consumer not in self.loc_consumers or consumer == "-":
            return f"a CONSUMER named by a loc record above, saw '{consumer}'"
        if consumer in self.sets:
            return f"one set record per consumer, saw '{consumer}' twice"
        if not SHA256_HEX.fullmatch(dig):
            return f"DIGEST as 64 lower-case hex characters, saw '{dig}'"
        if not _DIGITS.fullmatch(size):
            return f"BYTES as decimal digits, saw '{size}'"
        if not plain(state) or not state.startswith("."):
            return f"STATE as plain components, the first hidden (.NAME), saw '{state}'"
        if not plain(root):
            return f"ROOT as a path inside BAKE_ASSETS, saw '{root}'"
        self.sets.add(consumer)
        return None

    def check_dir(self, consumer: str, view: str, path: str) -> str | None:
        if view not in VIEWS:
            return f"VIEW both or copied, saw '{view}'"
        if path != "." and not plain(path):
            return f"PATH as . or plain relative components, saw '{path}'"
        return None

    def check_place(self, consumer: str, how: str, source: str, dest: str) -> str | None:
        if how not in HOWS:
            return f"HOW tree, link or copy, saw '{how}'"
        if not plain(source):
            return f"SOURCE as a path inside BAKE_ASSETS, saw '{source}'"
        if dest != "." and not plain(dest):
            return f"DEST as . or a path inside the location, saw '{dest}'"
        return None

    def check_skip(self, consumer: str, name: str) -> str | None:
        return None if plain(name) else f"NAME as a path inside the location, saw '{name}'"

    def check_file(self, consumer: str, view: str, name: str, size: str, sha: str) -> str | None:
        if view not in VIEWS:
            return f"VIEW both or copied, saw '{view}'"
        problem = self.new_name(consumer, name) or (
            None if _DIGITS.fullmatch(size) else f"SIZE in bytes, saw '{size}'"
        )
        if problem:
            return problem
        if not SHA256_HEX.fullmatch(sha):
            return f"SHA256 as 64 lower-case hex characters, saw '{sha}'"
        self.names.add((consumer, name))
        self.files.add((consumer, name))
        return None

    def check_link(self, consumer: str, name: str, target: str) -> str | None:
        problem = self.new_name(consumer, name)
        if problem:
            return problem
        resolved = resolve_link(name, target)
        if resolved is None or (consumer, resolved) not in self.files:
            return f"TARGET naming a file record above inside the location, saw '{target}'"
        self.names.add((consumer, name))
        return None

    def new_name(self, consumer: str, name: str) -> str | None:
        if not plain(name):
            return f"NAME as a path inside the location, saw '{name}'"
        if (consumer, name) in self.names:
            return f"one file or link record per NAME, saw '{name}' twice"
        return None


def _fallback_ok(fallback: str, earlier: set[str]) -> bool:
    if fallback.startswith("@"):
        return fallback[1:] in earlier
    for root in ("$HOME", ""):
        if fallback == (root or "/"):
            return True
        if fallback.startswith(root + "/"):
            return plain(fallback[len(root) + 1 :])
    return False


def resolve_link(name: str, target: str) -> str | None:
    """Where a relative link at ``name`` points, relative to the location; None if it leaves it."""
    parts = name.split("/")[:-1]
    for part in target.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part in ("", "."):
            return None
        else:
            parts.append(part)
    return "/".join(parts) or None


def read(text: str) -> Reading:
    """Parse ``bake.serve`` text. Returns the accepted records and the refused lines.

    Raises ValueError when the first line is not the v1 header: nothing is served then.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0] != HEADER:
        raise ValueError(f"a {NAME} whose first line is '{HEADER}'")
    reader = _Reader()
    for number, raw in enumerate(lines[1:], start=2):
        if raw == "" or raw.startswith("#"):
            continue
        parts = raw.split("\t")
        # The entrypoint reads the head itself and hands everything from the first per-file record on to awk.
        reader.in_tail = reader.in_tail or parts[0] in ("file", "link")
        if len(raw.encode()) > MAX_LINE:
            problem: str | None = f"a line of at most {MAX_LINE} bytes"
        elif _CONTROL.search(raw.replace("\t", "")):
            problem = "fields without control characters"
        else:
            problem = reader.check(parts[0], parts[1:])
        if problem:
            reader.reading.refused.append((number, problem))
            continue
        cls = KINDS[parts[0]]
        values = [int(v) if is_int else v for is_int, v in zip(_INT_FIELDS[cls], parts[1:], strict=True)]
        reader.reading.records.append(cls(*values))
    return reader.reading

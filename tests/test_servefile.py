"""bake.serve v1 (docs/SERVE_FORMAT.md): one table of records, good and hostile, through the Python
writer and reader and through the entrypoint (its shell reads the head; the per-file records are
read by Python's reader, in the `bake seed` it runs), under dash and busybox sh.

Python owns the format: its reader and `bake seal` refuse every bad row. The entrypoint's shell
checks only what guards its own evals and paths (the header's version, a variable's name, plain
paths), so the rows split in two:
- GUARDED rows, and every refused per-file row (Python's reader reads them all), are refused by
  both sides, line for line;
- the other refused rows, in the head, are Python's alone; on them the entrypoint runs to the end,
  writes nothing outside a location, and runs no text (rows carrying a command substitution check
  that).

Each row is inserted into a real sealed bake.serve: a head record after the last head record, a
per-file record at the end. The entrypoint runs with one location in node storage (a directory
holding data), so that `bake seed` reads the per-file records too.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake import servefile
from tests.serve import SHELLS, Box, content, new_box, resolved, sealed

SHA = "0" * 64
FILES = {
    "nltk/corpora/tiny/words.txt": content("words", 900),
    "nltk/tokenizers/punkt.zip": content("punkt", 700),
    "whisper/base.pt": content("whisper", 1800),
}
DECLARED = {"nltk": "$NLTK_DATA", "whisper": "${XDG_CACHE_HOME:-$HOME/.cache}/whisper"}
REFUSED_VARS = [
    "PATH", "IFS", "ENV", "BASH_ENV", "CDPATH", "PWD", "OLDPWD", "HOME", "SHELL", "PS4", "TMPDIR",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHOME", "PYTHONPATH", "PERL5LIB", "PERL5OPT", "RUBYOPT",
    "RUBYLIB", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "BAKE_ASSETS", "SHELLOPTS", "BASHOPTS", "BASH_XTRACEFD",
    "GCONV_PATH", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "_", "PS1", "OPTIND", "TZDIR",
]  # fmt: skip

# (section, fields, accepted): head rows go after the last head record, tail rows at the end.
HEAD = "head"
TAIL = "tail"
ROWS: dict[str, tuple[str, list[str], bool]] = {
    "loc export": (HEAD, ["loc", "extra.0", "extra", "export", "EXTRA_DIR", "", ""], True),
    "loc under $HOME": (
        HEAD, ["loc", "extra.1", "extra", "under", "EXTRA_HOME", "sub dir", "$HOME/.extra"], True
    ),
    "loc under /": (HEAD, ["loc", "extra.2", "extra", "under", "EXTRA_ROOT", "x", "/"], True),
    "loc chained": (HEAD, ["loc", "extra.3", "-", "under", "EXTRA_CHAIN", "", "@nltk.0"], True),
    **{
        f"loc VAR {var}": (HEAD, ["loc", f"evil.{var}", "evil", "export", var, "", ""], False)
        for var in REFUSED_VARS
    },
    "loc VAR with a dash": (HEAD, ["loc", "evil.0", "evil", "export", "A-B", "", ""], False),
    "loc VAR empty": (HEAD, ["loc", "evil.0", "evil", "export", "", "", ""], False),
    "loc ID with a space": (HEAD, ["loc", "a b", "evil", "export", "EVIL", "", ""], False),
    "loc ID twice": (HEAD, ["loc", "nltk.0", "evil", "export", "EVIL", "", ""], False),
    "loc CONSUMER -x": (HEAD, ["loc", "evil.0", "-x", "export", "EVIL", "", ""], False),
    "loc MODE sideways": (HEAD, ["loc", "evil.0", "evil", "sideways", "EVIL", "", ""], False),
    "loc export with SUB": (HEAD, ["loc", "evil.0", "evil", "export", "EVIL", "sub", ""], False),
    "loc under relative FALLBACK": (HEAD, ["loc", "evil.0", "evil", "under", "EVIL", "x", "rel/dir"], False),
    "loc under FALLBACK ..": (HEAD, ["loc", "evil.0", "evil", "under", "EVIL", "x", "/a/../b"], False),
    "loc under FALLBACK @unknown": (HEAD, ["loc", "evil.0", "evil", "under", "EVIL", "x", "@nope"], False),
    "loc SUB ..": (HEAD, ["loc", "evil.0", "evil", "under", "EVIL", "../x", "/"], False),
    "loc 6 fields": (HEAD, ["loc", "evil.0", "evil", "export", "EVIL", ""], False),
    "loc 8 fields": (HEAD, ["loc", "evil.0", "evil", "export", "EVIL", "", "", ""], False),
    "loc control character": (HEAD, ["loc", "evil.0", "evil", "export", "EV\x01IL", "", ""], False),
    # 0x1f joins the fields the entrypoint keeps: split again, this SOURCE would give a DEST of ../x.
    "place SOURCE with the unit separator": (HEAD, ["place", "nltk", "link", "nltk/c\x1f../x", "y"], False),
    "loc field over 1024 bytes": (HEAD, ["loc", "evil.0", "evil", "under", "EVIL", "d" * 1025, "/"], False),
    "set for a consumer no loc names": (HEAD, ["set", "ghost", SHA, "0", ".bake", "ghost", ""], False),
    "set twice": (HEAD, ["set", "nltk", SHA, "0", ".bake", "nltk", ""], False),
    "set DIGEST short": (HEAD, ["set", "nltk2", "abc", "0", ".bake", "nltk", ""], False),
    "set BYTES negative": (HEAD, ["set", "nltk2", SHA, "-1", ".bake", "nltk", ""], False),
    "set STATE not hidden": (HEAD, ["set", "nltk2", SHA, "0", "bake", "nltk", ""], False),
    "set STATE climbing": (HEAD, ["set", "nltk2", SHA, "0", ".bake/../x", "nltk", ""], False),
    "set ROOT absolute": (HEAD, ["set", "nltk2", SHA, "0", ".bake", "/etc", ""], False),
    "set 6 fields": (HEAD, ["set", "nltk2", SHA, "0", ".bake", "nltk"], False),
    "dir": (HEAD, ["dir", "nltk", "both", "corpora/more"], True),
    "dir VIEW maybe": (HEAD, ["dir", "nltk", "maybe", "corpora"], False),
    "dir PATH ..": (HEAD, ["dir", "nltk", "both", "../escaped"], False),
    "dir PATH absolute": (HEAD, ["dir", "nltk", "both", "/etc"], False),
    "dir CONSUMER without a set": (HEAD, ["dir", "ghost", "both", "."], False),
    "place copy": (HEAD, ["place", "nltk", "copy", "nltk/tokenizers/punkt.zip", "punkt-copy.zip"], True),
    "place HOW move": (HEAD, ["place", "nltk", "move", "nltk", "."], False),
    "place SOURCE ..": (HEAD, ["place", "nltk", "link", "../etc", "etc"], False),
    "place DEST absolute": (HEAD, ["place", "nltk", "link", "nltk/corpora", "/etc/corpora"], False),
    "skip": (HEAD, ["skip", "nltk", "not-there"], True),
    "skip NAME ..": (HEAD, ["skip", "nltk", "../../etc/passwd"], False),
    "file copied only": (TAIL, ["file", "nltk", "copied", "node/only.bin", "0", SHA], True),
    "link to a file above": (TAIL, ["link", "nltk", "corpora/alias", "tiny/words.txt"], True),
    "unknown kind": (TAIL, ["pkg", "nltk", "x"], False),
    "loc after the first file record": (TAIL, ["loc", "late.0", "late", "export", "LATE", "", ""], False),
    "file 5 fields": (TAIL, ["file", "nltk", "both", "x.bin", "12"], False),
    "file VIEW maybe": (TAIL, ["file", "nltk", "maybe", "x.bin", "12", SHA], False),
    "file NAME ..": (TAIL, ["file", "nltk", "both", "../../../escaped", "700", SHA], False),
    "file NAME absolute": (TAIL, ["file", "nltk", "both", "/etc/passwd", "1", SHA], False),
    "file NAME twice": (TAIL, ["file", "nltk", "both", "corpora/tiny/words.txt", "900", SHA], False),
    "file SIZE not digits": (TAIL, ["file", "nltk", "both", "x.bin", "12x", SHA], False),
    "file SHA256 upper case": (TAIL, ["file", "nltk", "both", "x.bin", "12", "A" * 64], False),
    "file CONSUMER without a set": (TAIL, ["file", "ghost", "both", "x.bin", "12", SHA], False),
    "file control character": (TAIL, ["file", "nltk", "both", "x\x7f.bin", "12", SHA], False),
    "file field over 1024 bytes": (TAIL, ["file", "nltk", "both", "n" * 1025, "12", SHA], False),
    "link TARGET out of the location": (TAIL, ["link", "nltk", "corpora/x", "../../../../etc/passwd"], False),
    "link TARGET absolute": (TAIL, ["link", "nltk", "corpora/x", "/etc/passwd"], False),
    "link TARGET to no file record": (TAIL, ["link", "nltk", "corpora/x", "tiny/nothing"], False),
    "link 3 fields": (TAIL, ["link", "nltk", "corpora/x"], False),
    # Text a shell would run, where the entrypoint no longer checks the field: never run.
    "loc CONSUMER with text": (HEAD, ["loc", "evil.0", "$(touch canary)", "export", "EVIL", "", ""], False),
    "set DIGEST with text": (HEAD, ["set", "nltk2", "`touch canary`", "0", ".bake", "nltk", ""], False),
    "place HOW with text": (HEAD, ["place", "nltk", "$(touch canary)", "nltk/corpora", "x"], False),
    "file SIZE with text": (TAIL, ["file", "nltk", "both", "x.bin", "$(touch canary)", SHA], False),
    "link TARGET with text": (TAIL, ["link", "nltk", "corpora/x", "$(touch canary)"], False),
}  # fmt: skip

# The refused rows the entrypoint refuses too: what would reach one of its evals or leave a location.
GUARDED = {
    *(f"loc VAR {var}" for var in REFUSED_VARS),
    "loc VAR with a dash", "loc VAR empty", "loc control character", "loc ID with a space",
    "loc under relative FALLBACK", "loc under FALLBACK ..", "loc under FALLBACK @unknown", "loc SUB ..",
    "set DIGEST short", "set BYTES negative", "set STATE climbing", "set ROOT absolute",
    "set DIGEST with text",
    "dir PATH ..", "dir PATH absolute", "place SOURCE ..", "place DEST absolute", "skip NAME ..",
    "place SOURCE with the unit separator",
    "file NAME ..", "file NAME absolute",
}  # fmt: skip
PYTHON_ONLY = [r for r, (_, _, ok) in ROWS.items() if not ok and r not in GUARDED]


def with_row(text: str, section: str, row: list[str]) -> tuple[str, int]:
    """``text`` with the row inserted in its section; returns the new text and the row's line number."""
    lines = text.splitlines()
    if section == TAIL:
        lines.append("\t".join(row))
        return "\n".join(lines) + "\n", len(lines)
    at = next(i for i, line in enumerate(lines) if line.startswith(("file\t", "link\t")))
    lines.insert(at, "\t".join(row))
    return "\n".join(lines) + "\n", at + 1


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The bake.serve `bake seal` writes for FILES and the declared consumers."""
    root = sealed(FILES, declared=DECLARED)(tmp_path_factory.mktemp("serve") / "assets")
    return (root / "bake.serve").read_text()


def python_refused(text: str) -> list[int]:
    return [number for number, _ in servefile.read(text).refused]


@pytest.mark.parametrize("row", list(ROWS), ids=list(ROWS))
def test_the_python_reader(base: str, row: str) -> None:
    section, fields, accepted = ROWS[row]
    text, number = with_row(base, section, fields)

    refused = python_refused(text)

    assert refused == ([] if accepted else [number])


@pytest.mark.parametrize("row", [r for r, (_, _, ok) in ROWS.items() if ok])
def test_the_python_writer_writes_what_the_reader_reads(base: str, row: str) -> None:
    section, fields, _ = ROWS[row]
    text, _ = with_row(base, section, fields)

    records = servefile.read(text).records

    written = servefile.write(records)
    lines = sorted(map(servefile.line, records))
    assert sorted(map(servefile.line, servefile.read(written).records)) == lines
    assert servefile.write(servefile.read(written).records) == written


def _record(fields: list[str]) -> servefile.Record | None:
    """The record a row's fields make, or None when no record has them (a wrong count, a kind not in v1)."""
    cls = servefile.KINDS.get(fields[0])
    if cls is None or len(fields) - 1 != len(dataclasses.fields(cls)):
        return None
    return cls(*fields[1:])


# Refused for where they stand, which the writer decides itself: it is given records, not places.
PLACED = {"loc after the first file record"}


@pytest.mark.parametrize(
    "row", [r for r, (_, f, ok) in ROWS.items() if not ok and _record(f) and r not in PLACED]
)
def test_the_python_writer_refuses_what_the_reader_refuses(base: str, row: str) -> None:
    _, fields, _ = ROWS[row]
    records = [*servefile.read(base).records, _record(fields)]

    with pytest.raises(ValueError, match="would be refused"):
        servefile.write(records)


@pytest.fixture(params=SHELLS, ids=lambda s: s.name)
def box(request: pytest.FixtureRequest) -> Iterator[Box]:
    made = new_box(resolved(request.param), sealed(FILES, declared=DECLARED))
    yield made
    shutil.rmtree(made.root)


def shell_refused(box: Box, text: str) -> tuple[list[int], str]:
    """Run the entrypoint on ``text``; the lines it names as refused, and its stderr."""
    box.assets.chmod(0o755)
    (box.assets / "bake.serve").chmod(0o644)
    (box.assets / "bake.serve").write_text(text)
    data = box.root / "node data"  # a directory holding data: node storage, proved file by file
    data.mkdir(exist_ok=True)
    (data / "user.bin").write_bytes(b"user data")
    result = box.run("true", NLTK_DATA=data)
    assert result.returncode == 0, result.stderr
    numbers = re.findall(r"bake\.serve line (\d+): expected", result.stderr)
    return [int(n) for n in numbers], result.stderr


@pytest.mark.parametrize("row", [r for r in ROWS if r not in PYTHON_ONLY])
def test_the_entrypoint_agrees(box: Box, base: str, row: str) -> None:
    section, fields, _ = ROWS[row]
    text, _ = with_row(base, section, fields)

    refused, stderr = shell_refused(box, text)

    assert refused == python_refused(text), stderr


def written(root: Path) -> set[str]:
    """Every path under ``root``, relative, with what it is and its bytes."""
    found = set()
    for path in root.rglob("*"):
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        body = path.read_bytes().hex() if kind == "file" else ""
        found.add(f"{path.relative_to(root)} {kind} {body}")
    return found


# Where the entrypoint may write in the box: the locations (the node storage directory, the fallback
# locations under $HOME/.cache) and the job-local directories under TMPDIR; and the bake.serve
# the test itself writes.
LOCATIONS = ("node data", "home/.cache", "tmp/", "assets/bake.serve ")


@pytest.mark.parametrize("row", PYTHON_ONLY)
def test_the_entrypoint_on_a_row_only_python_refuses(box: Box, base: str, row: str) -> None:
    section, fields, _ = ROWS[row]
    text, number = with_row(base, section, fields)
    assert python_refused(text) == [number]
    before = {p for p in written(box.root) if not p.startswith(LOCATIONS)}

    refused, stderr = shell_refused(box, text)

    after = {p for p in written(box.root) if not p.startswith(LOCATIONS)}
    assert after == before, stderr  # nothing outside a location
    assert not (box.root / "canary").exists(), stderr  # no text run
    # A per-file row is read by Python's reader, in bake seed, and named; a head row only the shell read.
    assert refused == ([number] if section == TAIL else []), stderr


def test_the_sealed_file_is_read_whole_by_both(box: Box, base: str) -> None:
    assert python_refused(base) == []
    assert shell_refused(box, base)[0] == []


def test_a_header_other_than_v1_is_refused_whole(base: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="# bake serve v1"):
        servefile.read(base.replace("# bake serve v1", "# bake serve v2", 1))


# -- what a shell, the loader or libc reads to decide what runs (issue 29, finding 9) ------------------------

# Each variable with the manual that says it is read: bash(1) "Shell Variables" (bash 5.2), dash(1)
# "ENVIRONMENT" and its "Builtins", busybox(1) ash, ld.so(8) "ENVIRONMENT", and glibc's unsecvars.h, the
# variables glibc itself drops for a setuid program because they decide what code it loads.
DECIDES_WHAT_RUNS = {
    "PATH": "bash(1), dash(1), busybox ash: where commands are looked up",
    "IFS": "bash(1), dash(1), busybox ash: word splitting of every expansion",
    "ENV": "dash(1), busybox ash, bash(1) in POSIX mode: a script run at start-up",
    "BASH_ENV": "bash(1): a script run before every non-interactive bash",
    "SHELLOPTS": "bash(1): options set at start-up (an unknown name stops every bash)",
    "BASHOPTS": "bash(1): shopt options set at start-up",
    "BASH_FUNC_x%%": "bash(1) FUNCTIONS: functions imported from the environment (BASH_* covers bash's own)",
    "BASH_COMPAT": "bash(1): the compatibility level, how commands behave",
    "BASH_LOADABLES_PATH": "bash(1): where enable -f loads builtins from",
    "BASH_XTRACEFD": "bash(1): where set -x writes",
    "POSIXLY_CORRECT": "bash(1): POSIX mode at start-up (then ENV is run)",
    "EXECIGNORE": "bash(1): which commands PATH search skips",
    "GLOBIGNORE": "bash(1): what a glob expands to",
    "FUNCNEST": "bash(1): how deep functions may nest before a command aborts",
    "FCEDIT": "bash(1), dash(1): the editor fc runs",
    "PROMPT_COMMAND": "bash(1): a command run before each prompt",
    "PS0": "bash(1): expanded (command substitution included) after each command is read",
    "PS1": "bash(1), dash(1), busybox ash: the prompt, expanded",
    "PS2": "bash(1), dash(1), busybox ash: the continuation prompt, expanded",
    "PS3": "bash(1): the select prompt",
    "PS4": "bash(1), dash(1), busybox ash: expanded before each traced command",
    "OPTIND": "bash(1), dash(1) getopts: which argument getopts reads next",
    "TMOUT": "bash(1): read and the shell itself time out and exit",
    "CDPATH": "bash(1), dash(1), busybox ash: where cd goes",
    "PWD": "bash(1), dash(1): the working directory the shell believes",
    "OLDPWD": "bash(1), dash(1): where cd - goes",
    "HOME": "bash(1), dash(1): ~ and cd with no argument",
    "SHELL": "bash(1): the shell other programs start",
    "_": "bash(1): the last argument; dash and busybox ash export it for every command",
    "TMPDIR": "bash(1), glibc unsecvars.h: where here-documents and temporary files go",
    "LD_PRELOAD": "ld.so(8): objects loaded into every program",
    "LD_LIBRARY_PATH": "ld.so(8): where libraries are looked up",
    "LD_AUDIT": "ld.so(8): auditing objects loaded into every program",
    "GCONV_PATH": "glibc unsecvars.h: iconv modules (code) loaded by iconv_open",
    "GETCONF_DIR": "glibc unsecvars.h: the programs getconf runs",
    "GLIBC_TUNABLES": "glibc unsecvars.h, ld.so(8): the allocator's and loader's tunables",
    "HOSTALIASES": "glibc unsecvars.h: host name aliases",
    "LOCALDOMAIN": "glibc unsecvars.h: the resolver's search domains",
    "LOCPATH": "glibc unsecvars.h: where locales (and their code conversions) are loaded from",
    "MUSL_LOCPATH": "musl's locale loader, its LOCPATH",
    "MALLOC_TRACE": "glibc unsecvars.h: a file the allocator writes (MALLOC_* tunes the allocator)",
    "MALLOC_ARENA_MAX": "glibc mallopt(3): the allocator's arenas",
    "NIS_PATH": "glibc unsecvars.h: NIS+ name lookup",
    "NLSPATH": "glibc unsecvars.h: message catalogs catopen loads",
    "RESOLV_HOST_CONF": "glibc unsecvars.h: the resolver's host configuration",
    "RES_OPTIONS": "glibc unsecvars.h: the resolver's options",
    "TZDIR": "glibc unsecvars.h: where time zone files are read from",
}


def test_every_variable_that_decides_what_runs_is_refused() -> None:
    assert [var for var in DECIDES_WHAT_RUNS if not servefile.refused_var(var)] == []


def test_the_entrypoint_refuses_exactly_the_python_table() -> None:
    script = (Path(__file__).resolve().parents[1] / "scripts/entrypoint.sh").read_text()
    body = script[script.index("_unsafe_var() {") :]
    pattern = re.search(r"case \$1 in\n(.*?)\) return 0 ;;\n", body, re.DOTALL)
    assert pattern is not None, "the entrypoint's _unsafe_var has no case on the variable name"
    names = [word.strip() for word in pattern.group(1).replace("\\\n", "").split("|")]
    malformed = ["''", "[!A-Za-z_]*", "*[!A-Za-z0-9_]*"]
    assert sorted(names) == sorted([*malformed, *servefile.REFUSED])
    loader = script[script.index("_load_loc() {") :]
    reason = re.search(r"if _unsafe_var \"\$5\"; then\n\t\t_reason=\"(.*?)\"\n", loader)
    assert reason is not None, "the entrypoint's _load_loc does not refuse what _unsafe_var names"
    assert reason.group(1) == f"a variable name other than {servefile.REFUSED_TEXT}, saw '$5'"

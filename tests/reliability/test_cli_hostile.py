"""A newcomer's mistakes against the command line (``bake/cli.py``): one error line, no doubled prefix,
``-q``/``-v`` after every subcommand, and the property: any command, any plausible mistake is named once
with a contract exit. (Issue 28, findings 8 and 9.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import bake
from .newcomer import DATA, assert_one_clean_error, fetched, write_manifest

pytestmark = pytest.mark.timeout(120)


def test_no_doubled_prefix(tmp_path: Path) -> None:
    proc = bake("fetch", "--dst", tmp_path)
    line = assert_one_clean_error(proc, 2).splitlines()[0]
    assert line.startswith("bake: error: ") and "bake: error: bake" not in line, line


@pytest.mark.parametrize(
    "command", ["fetch", "verify", "manifest", "doctor", "seal", "add", "check-context", "publish", "pin",
                "cache prune"]
)  # fmt: skip
def test_q_and_v_are_taken_after_every_subcommand(tmp_path: Path, command: str) -> None:
    for flag in ("-q", "-v", "--quiet", "--verbose"):
        proc = bake(*command.split(), flag, cwd=tmp_path)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 2, 3, 4), proc.stderr
        assert f"unknown option {flag}" not in proc.stderr and "unrecognized" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["fecth"], {}, "did you mean fetch?"),
        (["fetch", "--dest", "d", "--connections", "abc"], {}, "--connections"),
        (["fetch", "--dest", "d"], {"BAKE_MIRRORS": "garbage"}, "BAKE_MIRRORS"),
    ],
)
def test_errors_name_the_mistake(
    tmp_path: Path, source: Path, argv: list[str], env: dict, named: str
) -> None:
    target = write_manifest(tmp_path, source.as_uri())
    proc = bake(*argv, "--manifest", target, cwd=tmp_path, env=env) if argv != ["fecth"] else bake(*argv)
    errors = assert_one_clean_error(proc, 2)
    assert named in errors, errors
    assert "_positive_int" not in errors, errors


_WORDS = st.sampled_from(["frobnicate", "colour", "force-it", "yes", "typo", "later"])


_BAD_NUMBERS = st.sampled_from(["abc", "0", "-3", "1e999", "nan", "12Q", "0x10", "1,5"])


_TYPED = {
    "fetch": ["--connections", "--attempts", "--jobs", "--timeout", "--deadline", "--max-size", "--min-free"],
    "add": ["--connections", "--attempts", "--timeout", "--deadline", "--max-size", "--min-free"],
    "cache prune": ["--max-age"],
}


_ZERO_ALLOWED = ("--max-size", "--min-free", "--max-age")


_SELECTING = ("fetch", "manifest", "seal", "verify")


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One manifest, its source and a fetched --dest, shared by every example (none may change them)."""
    root = tmp_path_factory.mktemp("mistakes")
    source = root / "model.bin"
    source.write_bytes(DATA)
    target, dest = fetched(root, source)
    return {"root": str(root), "manifest": str(target), "dest": str(dest), "url": source.as_uri()}


def base_args(command: str, baked: dict[str, str]) -> list[str]:
    """A valid invocation of ``command`` that changes nothing (a mistake is added to it)."""
    m, d = ["--manifest", baked["manifest"]], ["--dest", baked["dest"]]
    cache = ["--cache-dir", str(Path(baked["root"]) / "c")]
    return {
        "fetch": [*m, *d, *cache],
        "verify": [*m, *d],
        "manifest": m,
        "seal": [*m, *d],
        "add": [baked["url"], "--path", "data/other.bin", *m, *cache],
        "doctor": ["--assets", baked["dest"]],
        "cache prune": cache,
    }[command]


def _long_options(command: str) -> list[str]:
    from bake.cli import build_parser

    parser = build_parser()
    for word in command.split():
        parser = next(a for a in parser._actions if a.dest in ("command", "cache_command")).choices[word]
    return sorted(o for o in parser._option_string_actions if o.startswith("--") and len(o) > 5)


@st.composite
def mistakes(draw: st.DrawFn, command: str, baked: dict[str, str]) -> tuple[list[str], str]:
    """One plausible mistake for ``command``: the arguments to add, and the bad token they carry."""
    kinds = ["misspelt", "unknown"] + (["typed"] if command in _TYPED else [])
    kinds += ["group", "absent manifest"] if command in _SELECTING else []
    kinds += ["mirror"] if command in ("fetch", "add") else []
    kinds += ["scheme", "relative file"] if command == "add" else []
    kinds += ["absent assets"] if command == "doctor" else []
    kind, word = draw(st.sampled_from(kinds)), draw(_WORDS)
    if kind == "misspelt":
        option = draw(st.sampled_from(_long_options(command)))
        at = draw(st.integers(3, len(option) - 1))
        token = option[:at] + option[at + 1 :]  # a letter dropped, as fingers drop one
        if token in _long_options(command):
            token = option + "s"
        return [token], token
    if kind == "unknown":
        return [f"--{word}"], f"--{word}"
    if kind == "typed":
        option = draw(st.sampled_from(_TYPED[command]))
        # 0 bytes and 0 days are real settings; a count or a number of seconds must be positive.
        value = draw(_BAD_NUMBERS.filter(lambda v: v != "0" or option not in _ZERO_ALLOWED))
        return [option, value], value
    if kind == "group":
        return ["--group", f"no-such-{word}"], f"no-such-{word}"
    if kind == "absent manifest":
        return ["--manifest", str(Path(baked["root"]) / f"absent-{word}.toml")], f"absent-{word}.toml"
    if kind == "absent assets":
        return ["--assets", str(Path(baked["root"]) / f"absent-{word}")], f"absent-{word}"
    if kind == "mirror":
        return ["--mirror", f"garbage-{word}"], f"garbage-{word}"
    return [], f"ftp://host/{word}.bin" if kind == "scheme" else f"file:relative-{word}.bin"


@given(data=st.data(), command=st.sampled_from(["fetch", "verify", "manifest", "seal", "add", "doctor",
                                                 "cache prune"]))  # fmt: skip
@pytest.mark.timeout(300)
def test_a_plausible_mistake_is_named_once_with_a_contract_exit(
    baked: dict[str, str], data: st.DataObject, command: str
) -> None:
    from bake.cli import EXIT_CODES

    extra, token = data.draw(mistakes(command, baked))
    args = base_args(command, baked)
    if command == "add" and not extra:  # a bad URL: in place of the good one
        args[0] = token
    proc = bake(*command.split(), *args, *extra, cwd=Path(baked["root"]))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in EXIT_CODES[command.split()[0]] and proc.returncode != 0, proc.stderr
    naming = [line for line in proc.stderr.splitlines() if token in line]
    assert len(naming) == 1 and "bake: error:" in proc.stderr, (token, proc.stderr)

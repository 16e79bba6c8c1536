"""Every command's ``--help``, run as a user runs it, and the completion scripts generated from the parser.

The commands come from the parser itself (``bake.usage.parsers``), so a command added later is
run here with no change to this file: its id in the test names is the command line.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bake import usage
from bake.cli import EXIT_CODES, build_parser
from tests.runners import bake, cli_env

COMMANDS = [words for words, _ in usage.parsers(build_parser())]
IDS = [" ".join(("bake", *words)) for words in COMMANDS]

# The variables each command reads, found in its code (os.environ reads, the fetch engine's
# options): its help must name each. A command not listed here names whatever it declares.
READS = {
    "fetch": {"BAKE_MANIFEST", "BAKE_MIRRORS", "HTTPS_PROXY", "SSL_CERT_FILE", "HF_TOKEN", "XDG_CACHE_HOME"},
    "add": {"BAKE_MANIFEST", "BAKE_MIRRORS", "XDG_CACHE_HOME"},
    "verify": {"BAKE_MANIFEST"},
    "manifest": {"BAKE_MANIFEST"},
    "seal": {"BAKE_MANIFEST"},
    "doctor": {"BAKE_ASSETS"},
    "harvest": {"BAKE_MANIFEST", "BAKE_ASSETS"},
    "publish": {"BAKE_MANIFEST", "BAKE_MIRRORS", "BAKE_FETCH_ARGS"},
    "pin": {"BAKE_MANIFEST"},
    "cache": {"XDG_CACHE_HOME"},
}


@pytest.mark.parametrize("words", COMMANDS, ids=IDS)
def test_help_exits_0_and_says_how_the_command_ends(words: tuple[str, ...], tmp_path: Path) -> None:
    proc = bake(*words, "--help", cwd=tmp_path)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert proc.stdout.startswith("usage: bake"), proc.stdout
    codes = proc.stdout.split("exit codes:\n", 1)[-1]
    declared = EXIT_CODES[words[0]] if words else sorted({c for cs in EXIT_CODES.values() for c in cs})
    for code in declared:
        assert re.search(rf"^  {code}  \S", codes, re.MULTILINE), (code, proc.stdout)
    for name in READS.get(words[0], set()) if words else ():
        assert re.search(rf"^  {name} ", proc.stdout, re.MULTILINE), (name, proc.stdout)


def _options() -> list[tuple[str, argparse.Action]]:
    return [
        (" ".join(("bake", *words, *(action.option_strings[-1:] or [action.dest]))), action)
        for words, parser in usage.parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
    ]


OPTIONS = _options()


@pytest.mark.parametrize(("name", "action"), OPTIONS, ids=[name for name, _ in OPTIONS])
def test_every_option_has_help_and_names_its_default(name: str, action: argparse.Action) -> None:
    assert action.help, f"{name}: no help text"
    takes_value = action.option_strings and action.nargs != 0 and not action.required
    if takes_value and action.default in (None, [], argparse.SUPPRESS):
        # No default worth printing: the text says what happens without the option.
        assert "default" in action.help, f"{name}: its help does not say what happens without it"


def test_q_and_v_together_are_named_alone(tmp_path: Path) -> None:
    proc = bake("-q", "-v", "manifest", "check", "--manifest", "M", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "not allowed with argument -q/--quiet" in proc.stderr, proc.stderr
    assert "unknown option" not in proc.stderr and "--manifest" not in proc.stderr, proc.stderr


# -- completion -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("completion")
    found = {}
    for shell in usage.SHELLS:
        proc = bake("completion", shell, cwd=out)
        assert proc.returncode == 0, proc.stderr
        found[shell] = out / f"bake.{shell}"
        found[shell].write_text(proc.stdout)
    return found


def _bash_complete(script: Path, line: str) -> list[str]:
    """What bash's programmable completion offers for ``line`` (its last word being typed)."""
    words = line.split(" ")
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}; COMP_POINT={len(line)}\n"
        '_shtab_bake bake "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("bake fe", "fetch"),
        ("bake fetch --de", "--dest"),
        ("bake cache pr", "prune"),
        ("bake cache prune --dr", "--dry-run"),
        ("bake completion z", "zsh"),
    ],
)
def test_bash_completion_offers_what_the_parser_takes(
    scripts: dict[str, Path], line: str, offered: str
) -> None:
    assert offered in _bash_complete(scripts["bash"], line)


def test_zsh_completion_is_generated_from_the_parser(scripts: dict[str, Path]) -> None:
    text = scripts["zsh"].read_text()
    assert text.startswith("#compdef bake"), text[:200]
    for words in COMMANDS:
        if len(words) == 1:
            assert re.search(rf"\b{re.escape(words[0])}\b", text), words
    assert "--min-free" in text and "--dest" in text
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.fail("zsh is needed to check the zsh completion script; scripts/toolchain.sh up installs it")
    proc = subprocess.run([zsh, "-n", str(scripts["zsh"])], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def test_completion_without_shtab_names_the_install_line(tmp_path: Path) -> None:
    code = "import sys; sys.modules['shtab'] = None; from bake.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "completion", "bash"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install shtab" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

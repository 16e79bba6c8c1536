"""Every command the README shows either runs here, as written, or is marked as needing the real origins.

A ``sh`` block of the README whose first line is a comment saying "needs the real origins" is
checked as far as this machine allows: each ``bake`` command parses with bake's own parser, each
``docker buildx bake`` command resolves (``--print``) against this checkout, each script exists
and parses. A block marked "as root" installs what Debian lacks; tests/image/test_install.py runs
it, and the Install block after it, on fresh Debian 12 and 13 roots. Every other block runs whole,
as one script, in a copy of the checkout with nothing but the system's python3 on PATH: each
block makes its own fresh venv, as a new user does, so what a new user types is what the test types.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bake.cli import build_parser
from bake.errors import UsageError
from tests.image import fail_or_skip
from tests.readme import AS_ROOT, MARK, blocks, commands, copy_checkout, install_blocks, marked
from tests.runners import REPO

BLOCKS = blocks()
MARKED = [c for b in BLOCKS if marked(b, MARK) for c in commands(b)]
RUNNABLE = [b for b in BLOCKS if not marked(b, MARK) and not marked(b, AS_ROOT)]


def test_the_readme_shows_commands_of_both_kinds() -> None:
    assert MARKED and RUNNABLE, "the README's sh blocks were not found as this test expects"


@pytest.mark.parametrize("command", MARKED)
def test_a_marked_command_is_checked_as_far_as_this_machine_allows(command: str) -> None:
    argv = shlex.split(command)
    if argv[0] == "bake":
        try:
            build_parser().parse_args(argv[1:])
        except UsageError as exc:
            pytest.fail(f"README: {command!r} does not parse: {exc}")
    elif argv[:3] == ["docker", "buildx", "bake"]:
        if shutil.which("docker") is None:
            fail_or_skip("docker is needed to resolve the README's docker buildx bake commands")
        proc = subprocess.run(
            [*argv, "--print"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, f"README: {command!r} does not resolve: {proc.stderr[-2000:]}"
    elif argv[0].startswith("scripts/"):
        script = REPO / argv[0]
        assert script.is_file() and os.access(script, os.X_OK), f"README: {argv[0]} is not an executable file"
        shell = "bash" if script.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash") else "sh"
        assert subprocess.run([shell, "-n", str(script)], check=False).returncode == 0
    else:
        pytest.fail(f"README: no way to check {command!r}; teach this test, or run it in an unmarked block")


def test_scripts_test_sh_is_what_ci_runs() -> None:
    """The suite's own command needs no other proof: CI runs it."""
    assert "exec scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_install_is_venv_first_and_pypi_comes_after_the_first_release() -> None:
    root, user = install_blocks()
    assert "python3-venv" in root and commands(user)[0].startswith("python3 -m venv "), user
    assert not any(c.startswith(("pip install", "sudo pip")) for c in commands(root)), root
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for paragraph in re.split(r"\n\s*\n", text):
        if re.search(r"install bake-assets\b", paragraph):  # from PyPI: never as what works today
            assert paragraph.startswith("After the first release"), paragraph


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bake's wheel, built once from this checkout, as the README's Install builds it."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("bake_assets-*-py3-none-any.whl")
    return built


@pytest.fixture
def checkout(tmp_path: Path, wheel: Path) -> Path:
    """A copy of this checkout's tracked files, as a user's clone has them, with the wheel Install
    builds in dist/ (blocks after Install start from it)."""
    copy = copy_checkout(tmp_path / "checkout")
    (copy / "dist").mkdir(exist_ok=True)
    shutil.copy2(wheel, copy / "dist" / wheel.name)
    return copy


def _id(block: str) -> str:
    return commands(block)[0].split(" &&")[0][:40]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("block", RUNNABLE, ids=[_id(b) for b in RUNNABLE])
def test_an_unmarked_block_runs_as_written(block: str, checkout: Path, tmp_path: Path) -> None:
    """The whole block, as one ``sh -e`` script (a line's variables and venv reach the next), with only
    the system's python3 on PATH: the block's own venv is the one it uses."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"/usr/bin{os.pathsep}/bin", HOME=str(tmp_path / "home"))
    proc = subprocess.run(
        ["sh", "-ec", block], cwd=checkout, env=env, capture_output=True, text=True, timeout=800
    )
    assert proc.returncode == 0, f"README block exited {proc.returncode}:\n{block}\n{proc.stderr[-3000:]}"
    if "--print-env" in block:  # the walk-through: its last line shows the served file
        assert proc.stdout.endswith("a stand-in model\n"), proc.stdout[-2000:]


def _exit_code_rows() -> list[tuple[str, tuple[int, ...]]]:
    """(command, exit codes) for each row of the README's Commands table."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `bake ([\w-]+)[^|]*(?:\|[^|\n]*)*?\| ([\d, ]+) \|$", text, re.MULTILINE)
    return [(name, tuple(int(c) for c in codes.split(","))) for name, codes in rows]


def test_the_exit_code_table_is_the_codes_the_commands_declare() -> None:
    from bake.cli import COMMANDS, EXIT_CODES

    rows = _exit_code_rows()
    assert len(rows) >= len(COMMANDS), rows
    for name, codes in rows:
        assert codes == EXIT_CODES[name], (
            f"README: bake {name} exits {codes}, the code declares {EXIT_CODES[name]}"
        )
    assert {name for name, _ in rows} == set(EXIT_CODES), (
        "README: a command's exit codes are not in the table"
    )


def _table_synopses() -> list[tuple[str, str]]:
    """(command, synopsis) for each ``bake COMMAND …`` a row of the README's Commands table shows."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `bake ")]
    return [(m.group(1), m.group(0)) for row in rows for m in re.finditer(r"`bake ([a-z][\w-]*)[^`]*`", row)]


SYNOPSES = _table_synopses()


@pytest.mark.parametrize(("name", "synopsis"), SYNOPSES, ids=[s for _, s in SYNOPSES])
def test_the_command_table_shows_only_options_the_command_takes(name: str, synopsis: str) -> None:
    from bake import usage

    taken = {
        option
        for words, parser in usage.parsers(build_parser())
        if words[:1] == (name,)
        for option in parser._option_string_actions
    }
    shown = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", synopsis))
    assert shown <= taken, (
        f"README: `{synopsis}` shows {sorted(shown - taken)}, which bake {name} does not take"
    )

"""Every command the README shows either runs here, as written, or is marked as needing the real origins.

A ``sh`` block of the README whose first line is a comment saying "needs the real origins" is
checked as far as this machine allows: each ``bake`` command parses with bake's own parser, each
``docker buildx bake`` command resolves (``--print``) against this checkout, each script exists
and parses. Every other block runs, line by line, in a copy of the checkout with a fresh venv on
PATH: what a new user types is what the test types.
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
from tests.runners import REPO, git

MARK = "needs the real origins"


def _blocks() -> list[list[str]]:
    """The README's ``sh`` blocks, each as its lines with continuations joined."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = []
    for body in re.findall(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        blocks.append(body.replace("\\\n", " ").splitlines())
    return blocks


def _commands(lines: list[str]) -> list[str]:
    """The commands of a block: comment lines and trailing comments dropped."""
    found = []
    for line in lines:
        command = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if command:
            found.append(command)
    return found


BLOCKS = _blocks()
MARKED = [c for b in BLOCKS if b and b[0].startswith("#") and MARK in b[0] for c in _commands(b)]
RUNNABLE = [_commands(b) for b in BLOCKS if not (b and b[0].startswith("#") and MARK in b[0])]


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
    copy = tmp_path / "checkout"
    for name in git(REPO, "ls-files", "-z").decode().split("\0"):
        source = REPO / name
        if name and (source.is_file() or source.is_symlink()):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name, follow_symlinks=False)
    (copy / "dist").mkdir(exist_ok=True)
    shutil.copy2(wheel, copy / "dist" / wheel.name)
    return copy


@pytest.mark.timeout(900)
@pytest.mark.parametrize("block", RUNNABLE, ids=[b[0].split()[0] + "…" for b in RUNNABLE])
def test_an_unmarked_block_runs_as_written(block: list[str], checkout: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    for command in block:
        proc = subprocess.run(
            ["sh", "-ec", command], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"README: {command!r} exited {proc.returncode}:\n{proc.stderr[-3000:]}"


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

"""Command line: assemble every command's parser, run one command, map errors to the contract's exit codes.

Each command lives in a module of its own, which owns its parser, its handler and its exit codes
(``bake/commands/__init__.py`` describes the interface); this module only puts them together.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import logging
import re
import sys
from typing import Any

from bake import __version__, report, usage
from bake.commands import (
    add,
    build,
    cache,
    check_context,
    completion,
    doctor,
    fetch,
    manifest,
    pin,
    publish,
    seal,
    verify,
)
from bake.control_chars import escape
from bake.errors import BakeError, UsageError
from bake.harvest import command as harvest
from bake.seed import command as seed

# Every command, in the order its help lists them: one list feeds the parser, each command's --help
# (its exit codes and variables) and README.md's table of commands (tests/test_readme.py checks it).
COMMANDS = (
    add,
    harvest,
    fetch,
    verify,
    manifest,
    doctor,
    seal,
    check_context,
    build,
    publish,
    pin,
    cache,
    seed,
    completion,
)

# The exit codes each command may return, read from the commands themselves. Every command exits 2
# for a usage error.
EXIT_CODES: dict[str, tuple[int, ...]] = {command.NAME: command.EXIT_CODES for command in COMMANDS}
EXIT_CODES["--version"] = (0,)


_INVALID_CHOICE = re.compile(r"invalid choice: '?([^'\s]*)'? \(choose from (.*)\)")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2 through our handler) instead of exiting itself.

    Options are spelled out (no abbreviations, so a script never silently means another option),
    and a misspelt one is named with the closest real option, even where argparse would first
    complain that a required option is missing (``--dst`` for ``--dest``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", usage.HelpFormatter)
        super().__init__(*args, **kwargs)
        self._tokens: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._tokens = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        self._refuse_lost_values(namespace)
        return namespace, extras

    def _refuse_lost_values(self, namespace: argparse.Namespace) -> None:
        """argparse before Python 3.12 reads ``--repository=--`` as "end of options" inside the value and
        stores an empty list where a string belongs, which a command would only trip over later."""
        for action in self._actions:
            if action.nargs is not None or not action.option_strings:
                continue
            value = getattr(namespace, action.dest, None)
            if value is action.default:
                continue
            values = value if isinstance(action, argparse._AppendAction) else [value]
            if any(isinstance(v, list) for v in values):
                self.error(f"argument {action.option_strings[-1]}: expected a value, got '--'")

    def _parsed_by(self) -> _Parser:
        """The innermost (sub)parser that read the command line: the one whose options apply."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    if isinstance(sub, _Parser) and sub._tokens:
                        return sub._parsed_by()
        return self

    def _misspelt(self) -> list[str]:
        """Each option among the tokens this parser read that it does not know, with the closest it does."""
        known = list(self._option_string_actions)
        found = []
        for token in itertools.takewhile(lambda t: t != "--", self._tokens):
            name = token.split("=", 1)[0]
            if not name.startswith("-") or name in known or re.fullmatch(r"-\d+(\.\d*)?|-", name):
                continue
            close = difflib.get_close_matches(name, known, n=1)
            found.append(f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else ""))
        return found

    def error(self, message: str) -> None:  # type: ignore[override]
        parser = self._parsed_by()
        misspelt = parser._misspelt()
        if " not allowed with argument " in message:
            # Two options that exclude each other (-q and -v): argparse stops there, before any
            # command read its own options, so nothing else on the line can be judged.
            misspelt = []
        if choice := _INVALID_CHOICE.search(message):
            # A misspelt command (or action): the closest one, as git and pip suggest it.
            word, choices = choice.group(1), re.findall(r"[\w-]+", choice.group(2))
            close = difflib.get_close_matches(word, choices, n=1)
            kind = "command" if re.match(r"argument (COMMAND|ACTION):", message) else "choice"
            message = f"unknown {kind} {word!r}" + (
                f" (did you mean {close[0]}?)" if close else f"; expected one of {', '.join(choices)}"
            )
        elif misspelt and message.startswith("unrecognized arguments"):
            message = "; ".join(misspelt)
        elif misspelt:
            message = "; ".join([*misspelt, message])
        raise UsageError(f"{message} (see `{parser.prog} --help`)")


def _add_verbosity(p: argparse.ArgumentParser, default: Any) -> None:
    """``-q`` and ``-v``, taken before the command and after it alike (pip's and hf's convention).

    Below the top level the default is SUPPRESS, so a flag given before the command is not reset.
    """
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no progress output (results still print)"
    )
    group.add_argument(
        "-v", "--verbose", action="store_true", default=default, help="debug logging: every attempt"
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every ``bake`` command (one entry of COMMANDS each).

    Each command's help ends with the variables it reads and its exit codes (EXIT_CODES).
    """
    parser = _Parser(prog="bake", description="Verified asset layers for ROCm CI images.")
    parser.add_argument(
        "--version", action="version", version=f"bake {__version__}", help="print the version"
    )
    _add_verbosity(parser, False)
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND", help="one of:"
    )
    for command in COMMANDS:
        command.add_parser(sub)
    parser.epilog = usage.epilog(sorted({c for codes in EXIT_CODES.values() for c in codes}), ())
    environment = {command.NAME: command.ENVIRONMENT for command in COMMANDS}
    for words, command_parser in usage.parsers(parser):
        if words:
            _add_verbosity(command_parser, argparse.SUPPRESS)
            command_parser.epilog = usage.epilog(EXIT_CODES[words[0]], environment[words[0]])
    return parser


# Every message bake prints passes one of these two, so text from servers, URLs and
# paths reaches the terminal with its control characters escaped (bake.control_chars.escape).
def _print_error(exc: BakeError) -> None:
    print(f"bake: error: {escape(str(exc), keep_layout=True)}", file=sys.stderr)


class _EscapingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return escape(super().format(record), keep_layout=True)


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except UsageError as exc:
        _print_error(exc)
        return exc.exit_code
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_EscapingFormatter("bake: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    args.parser, args.report = parser, None  # completion prints the parser that read the line
    try:
        args.report = _report_for(args)
        code = args.run(args)
    except BakeError as exc:
        _end_report(args.report, exc.exit_code, exc)
        _print_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        stop = "interrupted; partial downloads stay in the cache and a rerun resumes them"
        _end_report(args.report, 130, BakeError(stop))
        print(f"bake: {stop}", file=sys.stderr)
        return 130
    if args.report is not None and (problem := args.report.write(code)):
        done = "the assets are installed and verified" if args.command == "fetch" else f"it exited {code}"
        _print_error(
            UsageError(
                f"--json {args.report.target!r}: {problem}; the command did its work ({done}), "
                "so rerun with a writable --json path to get the report"
            )
        )
        return UsageError.exit_code
    return code


def _report_for(args: argparse.Namespace) -> report.Report | None:
    """The JSON report ``--json`` asks for, its path checked before the command does anything; or None."""
    target = getattr(args, "json", None)
    if target is None:
        return None
    command = args.command
    if command == "harvest":
        if args.diff is None:
            raise UsageError("--json reports harvest --diff; a harvest that pins writes the manifest instead")
        command = "harvest --diff"
    found = report.Report(command, str(target))
    found.check_target()
    return found


def _end_report(rep: report.Report | None, code: int, exc: BakeError) -> None:
    """Write the report of a command that failed with ``exc``; a report that cannot be written is said
    in the same error, so the failure is still stated once."""
    if rep is None:
        return
    rep.failed(exc)
    if problem := rep.write(code):
        exc.args = (f"{exc}\n--json {rep.target!r}: {problem}",)

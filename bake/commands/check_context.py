"""``bake check-context``: refuse real source changes in the build context, tolerate mode drift; warn of
untracked files, and export HEAD's tree."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bake.control_chars import escape

NAME = "check-context"
EXIT_CODES = (0, 1, 2, 4)
ENVIRONMENT: tuple[str, ...] = ()


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``check-context`` to the CLI's sub-parsers."""
    p = sub.add_parser("check-context", help="refuse real source changes, tolerate mode drift")
    p.set_defaults(run=cmd_check_context)
    p.add_argument(
        "directory", nargs="?", type=Path, default=Path(), help="the work tree to check (default: .)"
    )
    p.add_argument(
        "--export",
        type=Path,
        metavar="OUT",
        help="write HEAD's tree, modes normalised, to OUT; default: no export",
    )
    p.add_argument("--strict", action="store_true", help="untracked files fail the check too")


def cmd_check_context(args: argparse.Namespace) -> int:
    from bake import context

    report = context.check_context(args.directory, strict=args.strict, export=args.export is not None)
    _warn_untracked(report.untracked)
    if args.export:
        context.export_context(args.directory, args.export)
        print(f"bake: HEAD's tree exported to {args.export}")
    return 0


def _warn_untracked(untracked: tuple[str, ...]) -> None:
    if untracked:
        listing = "\n  ".join(escape(p) for p in untracked[:50])
        more = f"\n  … and {len(untracked) - 50} more" if len(untracked) > 50 else ""
        print(
            f"bake: warning: {len(untracked)} untracked file(s) would enter a plain build context "
            f"(commit, ignore or .dockerignore them; --strict refuses them):\n  {listing}{more}",
            file=sys.stderr,
        )

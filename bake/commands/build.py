"""``bake build``: check-context, then ``docker buildx bake`` with the words after ``--``."""

from __future__ import annotations

import argparse
from pathlib import Path

from bake.commands import options

NAME = "build"
EXIT_CODES = (0, 1, 2, 4, 5)
ENVIRONMENT: tuple[str, ...] = ()


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``build`` to the CLI's sub-parsers."""
    p = sub.add_parser("build", help="check-context, then docker buildx bake BAKE ARGS")
    p.set_defaults(run=cmd_build)
    p.add_argument("--export", action="store_true", help="build from an export of HEAD's tree")
    p.add_argument("--strict", action="store_true", help="untracked files fail the check too")
    p.add_argument(
        "--assets-image",
        metavar="REPO",
        help="take the asset layer from REPO:<manifest digest>, building and pushing it first if missing; "
        "default: the layer the bake file builds",
    )
    p.add_argument("bake_args", nargs=argparse.REMAINDER, help="passed to docker buildx bake (after --)")


def cmd_build(args: argparse.Namespace) -> int:
    from bake import build

    bake_args = options.passed_on(args.bake_args)
    return build.run_build(
        Path(), bake_args, export=args.export, strict=args.strict, assets_image=args.assets_image
    )

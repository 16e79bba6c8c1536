"""``bake seal``, an image-build step: add each consumer's links and ``bake.serve``, make the tree
read-only."""

from __future__ import annotations

import argparse
from pathlib import Path

from bake import seal
from bake.commands import options

NAME = "seal"
EXIT_CODES = (0, 2, 3)
ENVIRONMENT = ("BAKE_MANIFEST",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``seal`` to the CLI's sub-parsers."""
    p = sub.add_parser("seal", help="image-build step: add encoding links, make the tree read-only")
    p.set_defaults(run=cmd_seal)
    options.add_selection(p, default_manifest=True)
    p.add_argument("--dest", required=True, type=Path, help="the directory fetch filled")
    p.add_argument(
        "--remove-stray",
        action="store_true",
        help="remove files under --dest that no selected asset accounts for (seal refuses them otherwise)",
    )


def cmd_seal(args: argparse.Namespace) -> int:
    count = seal.seal(args.dest, options.selected(args), remove_stray=args.remove_stray)
    print(f"bake: sealed {count} asset(s) under {args.dest}")
    return 0

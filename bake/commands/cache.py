"""``bake cache prune``: reclaim partials no fetch holds and entries no manifest names."""

from __future__ import annotations

import argparse
from pathlib import Path

from bake import manifest
from bake.commands import options
from bake.control_chars import escape

NAME = "cache"
EXIT_CODES = (0, 2)
ENVIRONMENT = ("XDG_CACHE_HOME",)


def _days(text: str) -> float:
    value = options.number(float, text, "a number of days from 0 to 36500")
    if not 0 <= value <= 100 * 365:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected a number of days from 0 to 36500, got {text}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``cache`` and its actions to the CLI's sub-parsers."""
    p = sub.add_parser("cache", help="manage the download cache")
    cache_sub = p.add_subparsers(
        dest="cache_command", required=True, parser_class=type(p), metavar="ACTION", help="one of:"
    )
    prune = cache_sub.add_parser(
        "prune",
        help="reclaim partials no fetch holds (old, or of unknown size) and entries no manifest names",
    )
    prune.set_defaults(run=cmd_cache)
    prune.add_argument(
        "--manifest",
        action="append",
        default=[],
        type=Path,
        help="keep entries this manifest names; repeatable; default: keep every finished entry",
    )
    prune.add_argument(
        "--max-age",
        type=_days,
        default=0.0,
        metavar="DAYS",
        help="keep resumable partials younger than this for a rerun; by default every partial no "
        "running fetch holds is reclaimed (one of unknown size at any age)",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="remove nothing: list what would be removed, and the space"
    )
    prune.add_argument(
        "--cache-dir", type=Path, help="the download cache; default ${XDG_CACHE_HOME:-~/.cache}/bake"
    )


def cmd_cache(args: argparse.Namespace) -> int:
    from bake import cache

    keep = None
    if args.manifest:
        keep = {a.sha256 for m in args.manifest for a in manifest.load_manifest(m, allow_http=True)}
    result = cache.prune(
        args.cache_dir or cache.default_cache_dir(), keep, args.max_age, dry_run=args.dry_run
    )
    for path in result.removed:
        print(f"{'would remove' if args.dry_run else 'removed'} {escape(str(path))}")
    print(f"bake: {result}")
    return 0

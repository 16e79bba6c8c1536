"""``bake fetch``: download, verify and install every selected asset, then write the destination's index;
``--json`` reports each asset, fetched or failed."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bake import index, manifest, report
from bake.commands import options
from bake.errors import UsageError

log = logging.getLogger("bake")

NAME = "fetch"
EXIT_CODES = (0, 2, 3)
ENVIRONMENT = options.FETCHING_VARIABLES


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``fetch`` to the CLI's sub-parsers."""
    p = sub.add_parser("fetch", help="download, verify and install every selected asset")
    p.set_defaults(run=cmd_fetch)
    options.add_selection(p, default_manifest=True)
    p.add_argument("--dest", required=True, type=Path, help="directory that receives the assets")
    options.add_fetch_options(p)
    options.add_fetch_limit(p, "--jobs", options.positive_int, "assets fetched at once")
    options.add_json(p)


def cmd_fetch(args: argparse.Namespace) -> int:
    from bake import fetch

    assets = options.selected(args)
    body = options.report_body(args, dest=str(args.dest), manifest_digest=manifest.manifest_digest(assets))
    engine = options.fetch_options(args)
    if args.dest.exists() and not args.dest.is_dir():
        raise UsageError(f"--dest {args.dest}: exists and is not a directory")
    chosen = " ".join(f"--group {g}" for g in args.group) or "every asset"
    if warning := index.other_selection(args.dest, list(assets), chosen):
        log.warning("warning: %s", warning)
    try:
        records = fetch.fetch_assets(assets, args.dest, engine, options.progress_sink(args))
    except fetch.FetchFailed as exc:
        body["assets"] = report.fetched(assets, exc.records, set(exc.failures))
        raise
    body["assets"] = report.fetched(assets, records, set())
    index.write_index(args.dest, assets)
    print(
        f"bake: {len(assets)} asset(s) verified under {args.dest} "
        f"(manifest digest {body['manifest_digest']})",
        file=options.out(args),
    )
    return 0

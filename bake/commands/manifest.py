"""``bake manifest``: print the resolved manifest as JSON, ``check`` it against the installed consumers,
or print its ``digest``."""

from __future__ import annotations

import argparse
import json
import logging

from bake import manifest
from bake.commands import findings as shown
from bake.commands import options
from bake.errors import UsageError

log = logging.getLogger("bake")

NAME = "manifest"
EXIT_CODES = (0, 2)
ENVIRONMENT = ("BAKE_MANIFEST",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``manifest`` to the CLI's sub-parsers."""
    p = sub.add_parser("manifest", help="print the resolved manifest as JSON, `check` it, or its `digest`")
    p.set_defaults(run=cmd_manifest)
    p.add_argument(
        "action",
        nargs="?",
        choices=["check", "digest"],
        help="check: compare with the installed consumers; digest: print the manifest digest",
    )
    options.add_selection(p, default_manifest=True)


def cmd_manifest(args: argparse.Namespace) -> int:
    from bake import consumers, layers

    assets = options.selected(args)
    if args.action == "digest":
        print(manifest.manifest_digest(assets))
        return 0
    if args.action != "check":
        doc = {
            "manifest_digest": manifest.manifest_digest(assets),
            "assets": [manifest.to_json(a) for a in assets],
            "consumers": [
                {"prefix": c.prefix, "builtin": c.builtin, **c.declaration()} for c in assets.consumers()
            ],
        }
        print(json.dumps(doc, indent=2))
        return 0
    _, packed = layers.fit_budget(layers.units_of(assets))  # past the budget: what publish packs
    if packed:
        log.warning("warning: %s", packed)
    table = assets.consumers()
    findings = consumers.check_manifest(assets, table)
    unasked = consumers.not_asked(table, [a.path for a in assets], tables=True)
    libraries = ", ".join(lib for c in table for lib in c.tables)
    why = f"no library whose own table judges these entries ({libraries}) is installed"
    if declared := ", ".join(c.name for c in table if not c.builtin):
        why += f"; the declared consumer(s) {declared} carry no table of their own to check entries against"
    bad = shown.print_findings(args, findings, unasked, why)
    if bad:
        raise UsageError(
            f"{len(bad)} manifest entr{'y' if len(bad) == 1 else 'ies'} disagree with the installed "
            "consumers; a job would re-download them: fix the manifest or pin the consumer version"
        )
    return 0

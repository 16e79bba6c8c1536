"""The ``bake harvest`` command: its options, what it prints, and its exit codes.

``bake harvest DIR… [--manifest M] [--group G]…`` adds what it can pin and exits 0, naming
on stderr each thing it cannot pin. ``bake harvest --diff ROOT DIR…`` writes nothing: it prints
on stdout the entries harvest would add for what ROOT lacks, and exits 1 when there is any, or
when something could not be pinned; 0 when there is no difference. 2 is a usage error or a bad
manifest, 3 a cache that could not be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bake import consumers, manifest, report
from bake.control_chars import escape
from bake.harvest import caches, diff, pin

NAME = "harvest"
EXIT_CODES = (0, 1, 2, 3)
ENVIRONMENT = ("BAKE_MANIFEST", "BAKE_ASSETS")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``harvest`` to the CLI's sub-parsers."""
    p = sub.add_parser("harvest", help="pin what a job's caches hold, offline; --diff: what an image lacks")
    p.set_defaults(run=cmd_harvest)
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a cache a job filled (HF_HOME, XDG_CACHE_HOME, …)")
    p.add_argument(
        "--manifest",
        type=Path,
        help=f"manifest to edit, started if missing (default $BAKE_MANIFEST or {manifest.DEFAULT_MANIFEST})",
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        help="put new entries in group G; repeatable; default no group (shared assets)",
    )
    p.add_argument(
        "--diff",
        metavar="ROOT",
        help="write nothing: list what the sealed root (or image) ROOT lacks, exit 1 if any; "
        "default: pin into --manifest",
    )
    p.add_argument(
        "--json",
        metavar="REPORT",
        help="with --diff: also write the result as JSON (schema: docs/json.md) to REPORT, - for stdout, "
        "failures too; default: no JSON",
    )


def _manifest_path(args: argparse.Namespace) -> Path:
    return args.manifest or Path(os.environ.get("BAKE_MANIFEST") or manifest.DEFAULT_MANIFEST)


def _report(problems: list) -> None:
    for p in problems:
        print(f"bake: not pinned: {escape(p.where)}: {escape(p.why)}", file=sys.stderr)
    if problems:
        print(
            f"bake: {len(problems)} thing(s) not pinned, listed above; no entry was written for them",
            file=sys.stderr,
        )


def _diff(args: argparse.Namespace, table: Sequence[consumers.Consumer], urls: list[str]) -> int:
    """``--diff ROOT``: print (and report) what ROOT lacks; 1 when anything, 0 when nothing."""
    rep = getattr(args, "report", None)
    body = report.body_of(rep, root=args.diff)
    # ROOT first: a typo or an image that would be pulled is refused before any cache is read.
    locked, links = diff.read_root(args.diff)
    lacking = diff.missing(caches.scan(args.dirs, table, urls), locked, links)
    plan = pin.make_plan(lacking, [], args.group)
    problems = plan.problems + lacking.problems
    _report(problems)
    body["lacking"] = {
        "assets": [
            {"name": a.name, "path": a.path, "sha256": a.sha256, "size": a.size, "urls": list(a.urls)}
            for a in plan.assets
        ],
        "hub": [
            {
                "repo": e["repo"],
                "type": e["type"] or "model",
                "commit": e["commit"],
                "files": _files(e["files"]),
            }
            for e in plan.entries
        ]
        + [
            {"repo": repo, "type": kind, "commit": commit, "files": _files(records)}
            for (kind, repo, commit), records in plan.additions.items()
        ],
    }
    body["not_pinned"] = [{"where": p.where, "why": p.why} for p in problems]
    out = report.results_stream(rep)
    if plan.empty:
        print(
            f"bake: {args.diff} has everything the caches hold" + (", but see above" if problems else ""),
            file=out,
        )
    else:
        print(pin.new_text("", plan), end="", file=out)
    return 1 if not plan.empty or problems else 0


def _files(records: list[dict]) -> list[dict]:
    return [{"path": r["path"], "size": r.get("size"), "sha256": r["sha256"]} for r in records]


def cmd_harvest(args: argparse.Namespace) -> int:
    path = _manifest_path(args)
    existing = pin.read_existing(path)[1] if args.diff is None or path.is_file() else manifest.Manifest(())
    urls = [u for a in existing if a.hub is None for u in a.urls]
    table = consumers.table(existing.declared)
    if args.diff is not None:
        return _diff(args, table, urls)
    found = caches.scan(args.dirs, table, urls)
    plan = pin.harvest_into(path, found, args.group)
    for a in plan.assets:
        print(f"bake: added {a.name} ({a.path}, {a.size} bytes, sha256 {a.sha256}) to {path}")
    for e in plan.entries:
        entry = pin.label(e["type"] or "model", e["repo"], e["commit"])
        print(f"bake: added hub {entry}: {len(e['files'])} file(s) to {path}")
    for key, records in plan.additions.items():
        print(f"bake: added {len(records)} file(s) to hub {pin.label(*key)} in {path}")
    if plan.empty:
        print(f"bake: nothing new to pin in {path}")
    _report(found.problems + plan.problems)
    return 0

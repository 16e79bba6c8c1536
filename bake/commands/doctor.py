"""``bake doctor``, in a job: will each consumer accept the baked files? It reads the sealed asset root
(its lock and ``bake.serve``) and asks each consumer; ``--json`` reports each finding."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from bake import index
from bake.commands import findings as shown
from bake.commands import options
from bake.errors import FetchError, Problem

DEFAULT_ASSETS = "/opt/bake/assets"

NAME = "doctor"
EXIT_CODES = (0, 2, 3)
ENVIRONMENT = ("BAKE_ASSETS", "TIKTOKEN_RS_CACHE_DIR")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``doctor`` to the CLI's sub-parsers."""
    p = sub.add_parser("doctor", help="in a job: will each consumer accept the baked files?")
    p.set_defaults(run=cmd_doctor)
    p.add_argument(
        "--assets",
        type=Path,
        default=None,
        help=f"baked asset root; default $BAKE_ASSETS, else {DEFAULT_ASSETS}",
    )
    options.add_json(p)


def _assets_root(explicit: Path | None) -> Path:
    return explicit or Path(os.environ.get("BAKE_ASSETS") or DEFAULT_ASSETS)


def _sealed_table(root: Path) -> list:
    """The consumer table of the sealed root: the built-in consumers and those its ``bake.serve`` declares
    (the image holds no manifest, so they come back from what seal wrote). Raises FetchError when the
    root was fetched but not sealed."""
    from bake import consumers

    serve = root / consumers.SERVE_NAME
    if not serve.is_file():
        raise FetchError(
            f"--assets {root}: fetched but not sealed (no {consumers.SERVE_NAME}), so bake-entrypoint "
            f"serves nothing from it and every consumer would download: run `bake seal --manifest M "
            f"--dest {root}` after `bake fetch` in the image build"
        )
    return consumers.table(consumers.declared_from_serve(serve.read_text(encoding="utf-8")))


def cmd_doctor(args: argparse.Namespace) -> int:
    from bake import consumers

    root = _assets_root(args.assets)
    body = options.report_body(args, assets_root=str(root))
    # doctor takes --assets (or BAKE_ASSETS), not verify's --manifest and --dest.
    lock = index.read_lock(
        root, "point --assets (or BAKE_ASSETS) at a baked asset root, such as /opt/bake/assets"
    )
    table = _sealed_table(root)
    findings = consumers.doctor(root, lock, table)
    unasked = consumers.not_asked(table, [f.path for f in lock])
    body["findings"] = [_finding_record(f) for f in findings]
    body["not_asked"] = [{"library": lib, "why": why} for lib, why in unasked]
    owners = ", ".join(c.name for c in table)
    bad = shown.print_findings(args, findings, unasked, f"no baked file belongs to a consumer ({owners})")
    if bad:
        raise _doctor_failure(bad)
    return 0


def _finding_record(f) -> dict[str, Any]:
    keys = ("verdict", "consumer", "asset", "ok", "detail", "expected", "seen")
    record = {key: getattr(f, key) for key in keys}
    record["library"] = record.pop("consumer")
    return record


def _doctor_failure(bad: list) -> FetchError:
    """The one error of a doctor that found lookups that would download, or files a library rejects."""
    rejected = [f for f in bad if f.mismatch]
    lines = []
    if len(rejected) < len(bad):
        lines.append(
            f"{len(bad) - len(rejected)} consumer lookup(s) would trigger a download; run the job through "
            "bake-entrypoint, or run the runner line first: "
            'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
        )
    if rejected:
        libraries = ", ".join(sorted({f.consumer for f in rejected}))
        lines.append(
            f"{len(rejected)} baked file(s) are not what their library's own table expects ({libraries}): "
            "it would download them again; fix the manifest entry (sha256 and URL), or pin the library "
            "version that matches these bytes, and rebuild"
        )
    problems = tuple(
        Problem(
            "mismatch" if f.mismatch else "would-download", f.detail, f.asset, f.asset, f.expected, f.seen
        )
        for f in bad
    )
    return FetchError("; ".join(lines), problems=problems)

"""Command line: parse arguments, run one command, map errors to the contract's exit codes."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from bake import __version__, lockfile, manifest
from bake.errors import BakeError, FetchError, UsageError

log = logging.getLogger("bake")

DEFAULT_ASSETS = "/opt/bake/assets"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2 through our handler) instead of exiting itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _add_selection(p: argparse.ArgumentParser, *, default_manifest: bool = False) -> None:
    p.add_argument(
        "--manifest",
        default=manifest.DEFAULT_MANIFEST if default_manifest else None,
        help=f"asset manifest (TOML); default {manifest.DEFAULT_MANIFEST}",
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        help="select assets in group G plus shared assets; repeatable",
    )
    p.add_argument("--allow-http", action="store_true", help="allow plain http:// to non-loopback hosts")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every ``bake`` command."""
    parser = _Parser(prog="bake", description="Verified asset layers for ROCm CI images.")
    parser.add_argument("--version", action="version", version=f"bake {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    fetch = sub.add_parser("fetch", help="download, verify and install every selected asset")
    _add_selection(fetch, default_manifest=True)
    fetch.add_argument("--dest", required=True, type=Path, help="directory that receives the assets")
    fetch.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="PREFIX=REPLACEMENT",
        help="rewrite URLs; tried before the original; repeatable; also BAKE_MIRRORS",
    )
    fetch.add_argument("--no-origin", action="store_true", help="try only rewritten URLs")
    fetch.add_argument(
        "--cache-dir", type=Path, help="download cache; default ${XDG_CACHE_HOME:-~/.cache}/bake"
    )
    fetch.add_argument("--connections", type=_positive_int, help="connections per asset")
    fetch.add_argument("--attempts", type=_positive_int, default=5, help="attempts per source (default 5)")
    fetch.add_argument(
        "--timeout",
        type=_positive_float,
        default=30.0,
        help="connect and stall timeout in seconds (default 30)",
    )
    fetch.add_argument(
        "--deadline",
        type=_positive_float,
        help="wall-clock limit per asset in seconds; default max(30 min, size / 512 KiB/s), 2 h without size",
    )
    fetch.add_argument("--ca-bundle", help="CA bundle for https; default SSL_CERT_FILE or the system store")
    fetch.add_argument("--jobs", type=_positive_int, default=4, help="assets fetched at once (default 4)")
    fetch.add_argument("--json", type=Path, metavar="REPORT", help="write a per-asset report here")
    fetch.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    verify = sub.add_parser("verify", help="check assets under --dest against the manifest")
    _add_selection(verify)
    verify.add_argument("--dest", required=True, type=Path)

    man = sub.add_parser("manifest", help="print the resolved manifest as JSON, `check` it, or its `digest`")
    man.add_argument(
        "action",
        nargs="?",
        choices=["check", "digest"],
        help="check: compare with the installed consumers; digest: print the manifest digest",
    )
    _add_selection(man, default_manifest=True)

    doctor = sub.add_parser("doctor", help="in a job: will each consumer accept the baked files?")
    doctor.add_argument("--assets", type=Path, default=None, help="baked asset root; default $BAKE_ASSETS")

    seal = sub.add_parser("seal", help="image-build step: add encoding links, make the tree read-only")
    _add_selection(seal, default_manifest=True)
    seal.add_argument("--dest", required=True, type=Path)

    ctx = sub.add_parser("check-context", help="refuse real source changes, tolerate mode drift")
    ctx.add_argument("directory", nargs="?", type=Path, default=Path())
    ctx.add_argument("--export", type=Path, metavar="OUT", help="write HEAD's tree, modes normalised, to OUT")
    ctx.add_argument("--strict", action="store_true", help="untracked files fail the check too")

    build = sub.add_parser("build", help="check-context, then docker buildx bake BAKE ARGS")
    build.add_argument("--export", action="store_true", help="build from an export of HEAD's tree")
    build.add_argument("--strict", action="store_true", help="untracked files fail the check too")
    build.add_argument(
        "--assets-image",
        metavar="REPO",
        help="take the asset layer from REPO:<manifest digest>, building and pushing it first if missing",
    )
    build.add_argument("bake_args", nargs=argparse.REMAINDER, help="passed to docker buildx bake (after --)")

    cache = sub.add_parser("cache", help="manage the download cache")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, parser_class=_Parser)
    prune = cache_sub.add_parser("prune", help="drop stale partials and entries no manifest names")
    prune.add_argument(
        "--manifest",
        action="append",
        default=[],
        type=Path,
        help="keep entries this manifest names; repeatable",
    )
    prune.add_argument(
        "--max-age",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="partials older than this are removed (default 7)",
    )
    prune.add_argument("--cache-dir", type=Path)
    return parser


def _selected(args: argparse.Namespace) -> list[manifest.Asset]:
    assets = manifest.load_manifest(args.manifest, allow_http=args.allow_http)
    return manifest.select(assets, args.group)


def cmd_fetch(args: argparse.Namespace) -> int:
    from bake import cache, fetch
    from bake.fetch import progress

    assets = _selected(args)
    mirror_specs = os.environ.get("BAKE_MIRRORS", "").split() + args.mirror
    options = fetch.FetchOptions(
        cache_dir=args.cache_dir or cache.default_cache_dir(),
        mirrors=fetch.parse_mirrors(mirror_specs),
        no_origin=args.no_origin,
        connections=args.connections or fetch.DEFAULT_CONNECTIONS,
        attempts=args.attempts,
        timeout=args.timeout,
        deadline=args.deadline,
        allow_http=args.allow_http,
        ca_bundle=args.ca_bundle,
        jobs=args.jobs,
        started=fetch.process_started(),
    )
    if options.no_origin and not options.mirrors:
        raise UsageError("--no-origin needs at least one --mirror (or BAKE_MIRRORS); nothing could be tried")
    if args.dest.exists() and not args.dest.is_dir():
        raise UsageError(f"--dest {args.dest}: exists and is not a directory")
    sink = None if args.quiet else progress.make_progress(sys.stderr)
    try:
        records = fetch.fetch_assets(assets, args.dest, options, sink)
    except fetch.FetchFailed as exc:
        if args.json:
            _write_report(args.json, exc.records)
        raise
    if args.json:
        _write_report(args.json, records)
    lockfile.write_index(args.dest, assets)
    log.info(
        "%d asset(s) verified under %s (manifest digest %s)",
        len(assets),
        args.dest,
        manifest.manifest_digest(assets),
    )
    return 0


def _write_report(path: Path, records: list) -> None:
    report = [
        {
            "name": r.name,
            "path": r.path,
            "source": r.source,
            "bytes": r.bytes,
            "size": r.size,
            "seconds": round(r.seconds, 3),
            "attempts": r.attempts,
            "cached": r.cached,
        }
        for r in records
    ]
    path.write_text(json.dumps({"assets": report}, indent=2) + "\n", encoding="utf-8")


def _assets_root(explicit: Path | None) -> Path:
    return explicit or Path(os.environ.get("BAKE_ASSETS") or DEFAULT_ASSETS)


def cmd_verify(args: argparse.Namespace) -> int:
    # Inside an image there is no manifest; the lock written at fetch time says what must be there.
    if args.manifest is None and not Path(manifest.DEFAULT_MANIFEST).is_file():
        if args.group:
            raise UsageError("--group needs --manifest; the lock already holds only the selected assets")
        files = lockfile.read_lock(args.dest)
    else:
        args.manifest = args.manifest or manifest.DEFAULT_MANIFEST
        files = lockfile.expected_files(_selected(args))
    lockfile.verify_dest(args.dest, files)
    print(f"bake: {len(files)} asset(s) under {args.dest} verified")
    return 0


def _print_findings(findings: list, bad_label: str, consumers: str) -> list:
    """Print one line per finding on stdout; return the findings that are not ok."""
    for f in findings:
        print(f"{'ok' if f.ok else bad_label}  {f.consumer}  {f.asset}: {f.detail}")
    if not findings:
        print(f"bake: no consumer package ({consumers}) is installed; nothing to check")
    return [f for f in findings if not f.ok]


def cmd_manifest(args: argparse.Namespace) -> int:
    from bake import consumers

    assets = _selected(args)
    if args.action == "digest":
        print(manifest.manifest_digest(assets))
        return 0
    if args.action != "check":
        doc = {
            "manifest_digest": manifest.manifest_digest(assets),
            "assets": [manifest.to_json(a) for a in assets],
        }
        print(json.dumps(doc, indent=2))
        return 0
    findings = consumers.check_manifest(assets)
    bad = _print_findings(findings, "MISMATCH", "s3tokenizer, tiktoken")
    if bad:
        raise UsageError(
            f"{len(bad)} manifest entr{'y' if len(bad) == 1 else 'ies'} disagree with the installed "
            "consumers; a job would re-download them: fix the manifest or pin the consumer version"
        )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bake import consumers

    root = _assets_root(args.assets)
    findings = consumers.doctor(root, lockfile.read_lock(root))
    bad = _print_findings(findings, "WOULD DOWNLOAD", "s3tokenizer, openai-harmony, tiktoken")
    if bad:
        raise FetchError(
            f"{len(bad)} consumer lookup(s) would trigger a download; run the job through bake-entrypoint, "
            'or eval "$(bake-entrypoint --print-env)" first'
        )
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    lockfile.seal(args.dest, _selected(args))
    return 0


def cmd_check_context(args: argparse.Namespace) -> int:
    from bake import context

    report = context.check_context(args.directory, strict=args.strict)
    _warn_untracked(report.untracked)
    if args.export:
        context.export_context(args.directory, args.export)
        print(f"bake: HEAD's tree exported to {args.export}")
    return 0


def _warn_untracked(untracked: tuple[str, ...]) -> None:
    if untracked:
        listing = "\n  ".join(untracked[:50])
        more = f"\n  … and {len(untracked) - 50} more" if len(untracked) > 50 else ""
        print(
            f"bake: warning: {len(untracked)} untracked file(s) would enter a plain build context "
            f"(commit, ignore or .dockerignore them; --strict refuses them):\n  {listing}{more}",
            file=sys.stderr,
        )


def cmd_build(args: argparse.Namespace) -> int:
    from bake import build

    bake_args = args.bake_args[1:] if args.bake_args[:1] == ["--"] else args.bake_args
    return build.run_build(
        Path(), bake_args, export=args.export, strict=args.strict, assets_image=args.assets_image
    )


def cmd_cache(args: argparse.Namespace) -> int:
    from bake import cache

    keep = None
    if args.manifest:
        keep = {a.sha256 for m in args.manifest for a in manifest.load_manifest(m, allow_http=True)}
    result = cache.prune(args.cache_dir or cache.default_cache_dir(), keep, args.max_age)
    print(f"bake: {result}")
    return 0


COMMANDS = {
    "fetch": cmd_fetch,
    "verify": cmd_verify,
    "manifest": cmd_manifest,
    "doctor": cmd_doctor,
    "seal": cmd_seal,
    "check-context": cmd_check_context,
    "build": cmd_build,
    "cache": cmd_cache,
}


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"bake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="bake: %(message)s", stream=sys.stderr
    )
    try:
        return COMMANDS[args.command](args)
    except BakeError as exc:
        print(f"bake: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "bake: interrupted; partial downloads stay in the cache and a rerun resumes them", file=sys.stderr
        )
        return 130

"""Command line: parse arguments, run one command, map errors to the contract's exit codes."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import itertools
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bake import __version__, index, manifest, seal, verify
from bake.errors import BakeError, FetchError, ManifestError, UsageError
from bake.fetch import FetchOptions
from bake.fetch.clock import DEADLINE_RULE
from bake.fetch.options import MIN_FREE_RULE
from bake.text import escape
from bake.units import GIB, KIB, MIB, TIB, shown_size

log = logging.getLogger("bake")

DEFAULT_ASSETS = "/opt/bake/assets"


# Upper bounds that keep each number inside what threads, sockets and timers accept
# (Python's timeouts overflow near 2**63 ns); far above any sensible setting.
_MAX_COUNT = 1024
_MAX_SECONDS = 10**6


def _number(kind: Callable[[str], float], text: str, expected: str) -> float:
    """``kind(text)`` within the bounds the caller checks; argparse names the option in the message."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def _positive_int(text: str) -> int:
    expected = f"a whole number from 1 to {_MAX_COUNT}"
    value = _number(int, text, expected)
    if not 1 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
    return value


def _positive_float(text: str) -> float:
    expected = f"a number of seconds above 0 and at most {_MAX_SECONDS}"
    value = _number(float, text, expected)
    if not 0 < value <= _MAX_SECONDS:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
    return value


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB}


def _bytes(text: str) -> int:
    """A byte count: ``1048576``, ``512M``, ``16G``, ``1.5GiB`` (binary units)."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 1048576, 512M or 16G, got {text!r}")
    value = int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
    if value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"expected a size below 8 EiB, got {text}")
    return value


def _days(text: str) -> float:
    value = _number(float, text, "a number of days from 0 to 36500")
    if not 0 <= value <= 100 * 365:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected a number of days from 0 to 36500, got {text}")
    return value


_INVALID_CHOICE = re.compile(r"invalid choice: '?([^'\s]*)'? \(choose from (.*)\)")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2 through our handler) instead of exiting itself.

    Options are spelled out (no abbreviations, so a script never silently means another option),
    and a misspelt one is named with the closest real option, even where argparse would first
    complain that a required option is missing (``--dst`` for ``--dest``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._tokens: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._tokens = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

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
        if choice := _INVALID_CHOICE.search(message):
            # A misspelt command (or action): the closest one, as git and pip suggest it.
            word, choices = choice.group(1), re.findall(r"[\w-]+", choice.group(2))
            close = difflib.get_close_matches(word, choices, n=1)
            kind = "command" if re.match(r"argument \w*command:", message) else "choice"
            message = f"unknown {kind} {word!r}" + (
                f" (did you mean {close[0]}?)" if close else f"; expected one of {', '.join(choices)}"
            )
        elif misspelt and message.startswith("unrecognized arguments"):
            message = "; ".join(misspelt)
        elif misspelt:
            message = "; ".join([*misspelt, message])
        raise UsageError(f"{message} (see `{parser.prog} --help`)")


def _add_group(p: argparse.ArgumentParser, help_text: str) -> None:
    """``--group G``, repeatable: every command that selects or writes groups takes it alike."""
    p.add_argument("--group", action="append", default=[], metavar="G", help=help_text)


MANIFEST_DEFAULT_RULE = f"$BAKE_MANIFEST, else {manifest.DEFAULT_MANIFEST}"


class _FromEnv(str):
    """A manifest path that BAKE_MANIFEST gave, so that an error about it can name the variable."""


def _default_manifest() -> str:
    """The manifest a command reads when --manifest is not given: BAKE_MANIFEST names it (round 4)."""
    named = os.environ.get("BAKE_MANIFEST")
    return _FromEnv(named) if named else manifest.DEFAULT_MANIFEST


@contextlib.contextmanager
def _naming_the_variable(path: str) -> Iterator[None]:
    """Say that BAKE_MANIFEST chose the manifest a ManifestError is about, when it did."""
    try:
        yield
    except ManifestError as exc:
        if not isinstance(path, _FromEnv):
            raise
        raise ManifestError(f"{exc} (BAKE_MANIFEST names it: fix the variable, or pass --manifest)") from None


def _add_selection(p: argparse.ArgumentParser, *, default_manifest: bool = False) -> None:
    p.add_argument(
        "--manifest",
        default=_default_manifest() if default_manifest else None,
        help=f"asset manifest (TOML); default {MANIFEST_DEFAULT_RULE}",
    )
    _add_group(p, "select assets in group G plus shared assets; repeatable")
    p.add_argument("--allow-http", action="store_true", help="allow plain http:// to non-loopback hosts")


def _add_fetch_limit(p: argparse.ArgumentParser, flag: str, kind: Callable, help_text: str) -> None:
    """A numeric fetch option whose default is FetchOptions' own, so the parser never restates it."""
    default = {f.name: f.default for f in dataclasses.fields(FetchOptions)}[flag[2:]]
    shown = "" if default is None else " (default %(default)s)"
    p.add_argument(flag, type=kind, default=default, help=help_text + shown)


def _add_fetch_options(p: argparse.ArgumentParser) -> None:
    """The engine's options, shared by every command that fetches (fetch, add)."""
    p.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="PREFIX=REPLACEMENT",
        help="rewrite URLs; tried before the original; repeatable; also BAKE_MIRRORS",
    )
    p.add_argument("--no-origin", action="store_true", help="try only rewritten URLs")
    p.add_argument("--cache-dir", type=Path, help="download cache; default ${XDG_CACHE_HOME:-~/.cache}/bake")
    _add_fetch_limit(p, "--connections", _positive_int, "connections per asset")
    _add_fetch_limit(p, "--attempts", _positive_int, "attempts per source")
    _add_fetch_limit(p, "--timeout", _positive_float, "connect and stall timeout in seconds")
    _add_fetch_limit(
        p,
        "--deadline",
        _positive_float,
        f"wall-clock limit per asset in seconds (default {DEADLINE_RULE})",
    )
    p.add_argument("--ca-bundle", help="CA bundle for https; default SSL_CERT_FILE or the system store")
    defaults = FetchOptions(cache_dir=Path())
    p.add_argument(
        "--max-size",
        type=_bytes,
        default=defaults.max_size,
        metavar="SIZE",
        help="a file with no size in the manifest stops at SIZE (K, M, G, T suffixes; "
        f"default {shown_size(defaults.max_size)})",
    )
    p.add_argument(
        "--min-free",
        type=_bytes,
        default=defaults.min_free,
        metavar="SIZE",
        help=f"such a file stops before its filesystem has less than SIZE free (default {MIN_FREE_RULE})",
    )


def _add_fetch_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="download, verify and install every selected asset")
    p.set_defaults(run=cmd_fetch)
    _add_selection(p, default_manifest=True)
    p.add_argument("--dest", required=True, type=Path, help="directory that receives the assets")
    _add_fetch_options(p)
    _add_fetch_limit(p, "--jobs", _positive_int, "assets fetched at once")
    p.add_argument(
        "--json", type=Path, metavar="REPORT", help="write a per-asset report here (-: stdout), failures too"
    )


def _add_add_parser(sub: argparse._SubParsersAction) -> None:
    add = sub.add_parser("add", help="fetch a new file once and append its complete entry to the manifest")
    add.set_defaults(run=cmd_add)
    add.add_argument("target", metavar="URL", help="the file's URL (with --size-only: an asset NAME)")
    add.add_argument("--name", help="the entry's name; default from the URL or the consumer's naming rule")
    add.add_argument("--path", help="the entry's path; default from the owning consumer's naming rule")
    add.add_argument(
        "--sha256", metavar="H", help="the bytes must hash to H, else exit 3 and nothing is written"
    )
    add.add_argument(
        "--size-only", action="store_true", help="fill in the missing size of the existing entry NAME"
    )
    add.add_argument(
        "--manifest",
        default=_default_manifest(),
        help=f"manifest to edit; default {MANIFEST_DEFAULT_RULE} (started if missing)",
    )
    _add_group(add, "put the entry in group G; repeatable")
    add.add_argument("--allow-http", action="store_true", help="allow plain http:// to non-loopback hosts")
    _add_fetch_options(add)
    _add_hub_add_options(add)


def _add_hub_add_options(add: argparse.ArgumentParser) -> None:
    """The options ``bake add`` takes for a Hub repository (hf://ORG/REPO[@REV])."""
    from bake.hub import entry as hub_entry

    add.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="P",
        help="only files matching P (fnmatch); repeatable",
    )
    add.add_argument("--exclude", action="append", default=[], metavar="P", help="skip files matching P")
    add.add_argument("--repo-type", choices=hub_entry.KINDS, help="model (default) or dataset")
    add.add_argument(
        "--downloader",
        choices=hub_entry.DOWNLOADERS,
        help=f"how fetch gets the bytes (default {hub_entry.DEFAULT_DOWNLOADER}; recorded only if different)",
    )


def _add_verify_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check assets under --dest against the manifest")
    p.set_defaults(run=cmd_verify)
    _add_selection(p)
    p.add_argument("--dest", type=Path)
    p.add_argument("--image", metavar="REF", help="instead of --dest: prove an image's assets signed (--key)")
    p.add_argument("--key", metavar="KEY", help="with --image: the public key (a file, or a KMS URI)")
    p.add_argument("--repository", metavar="REPO", help="with --image: where the assets were published")
    _add_no_tlog(p)


def _add_no_tlog(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-tlog",
        action="store_true",
        help="no transparency log: cosign's --tlog-upload=false to sign, --insecure-ignore-tlog to verify",
    )


def _add_manifest_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("manifest", help="print the resolved manifest as JSON, `check` it, or its `digest`")
    p.set_defaults(run=cmd_manifest)
    p.add_argument(
        "action",
        nargs="?",
        choices=["check", "digest"],
        help="check: compare with the installed consumers; digest: print the manifest digest",
    )
    _add_selection(p, default_manifest=True)


def _add_doctor_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="in a job: will each consumer accept the baked files?")
    p.set_defaults(run=cmd_doctor)
    p.add_argument("--assets", type=Path, default=None, help="baked asset root; default $BAKE_ASSETS")


def _add_seal_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("seal", help="image-build step: add encoding links, make the tree read-only")
    p.set_defaults(run=cmd_seal)
    _add_selection(p, default_manifest=True)
    p.add_argument("--dest", required=True, type=Path)
    p.add_argument(
        "--remove-stray",
        action="store_true",
        help="remove files under --dest that no selected asset accounts for (seal refuses them otherwise)",
    )


def _add_check_context_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-context", help="refuse real source changes, tolerate mode drift")
    p.set_defaults(run=cmd_check_context)
    p.add_argument("directory", nargs="?", type=Path, default=Path())
    p.add_argument("--export", type=Path, metavar="OUT", help="write HEAD's tree, modes normalised, to OUT")
    p.add_argument("--strict", action="store_true", help="untracked files fail the check too")


def _add_build_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="check-context, then docker buildx bake BAKE ARGS")
    p.set_defaults(run=cmd_build)
    p.add_argument("--export", action="store_true", help="build from an export of HEAD's tree")
    p.add_argument("--strict", action="store_true", help="untracked files fail the check too")
    p.add_argument(
        "--assets-image",
        metavar="REPO",
        help="take the asset layer from REPO:<manifest digest>, building and pushing it first if missing",
    )
    p.add_argument("bake_args", nargs=argparse.REMAINDER, help="passed to docker buildx bake (after --)")


def _add_image_selection(p: argparse.ArgumentParser) -> None:
    """What publish and pin name: the assets of a manifest (and groups) in REPO, or bake's runtime."""
    p.add_argument(
        "--manifest", help=f"asset manifest (TOML); default {MANIFEST_DEFAULT_RULE}; not with --runtime"
    )
    p.add_argument("--repository", required=True, metavar="REPO", help="the image repository, no tag")
    _add_group(p, "bake group G plus shared assets; repeatable")
    p.add_argument(
        "--runtime", action="store_true", help="bake's runtime image (tini, bake-entrypoint, bake) instead"
    )


def _add_publish_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish",
        help="build and push REPO:<manifest digest> (or --runtime) unless the registry has it; "
        "print REPO:TAG@sha256:DIGEST",
    )
    p.set_defaults(run=cmd_publish)
    _add_image_selection(p)
    p.add_argument(
        "--sign",
        metavar="KEY",
        help="sign each image and attest each unit's files with cosign (a private key file or a KMS URI)",
    )
    _add_no_tlog(p)
    p.add_argument("buildx_args", nargs=argparse.REMAINDER, help="passed to docker buildx build (after --)")


def _add_pin_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pin", help="rewrite every reference to REPO in Dockerfiles to the published image, pinned by digest"
    )
    p.set_defaults(run=cmd_pin)
    _add_image_selection(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale line")
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse (exit 5) images not signed with KEY or attesting other files (default: the manifest's "
        "[signing] verify-key)",
    )
    _add_no_tlog(p)
    p.add_argument("dockerfiles", nargs="+", type=Path, metavar="DOCKERFILE")


def _add_cache_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="manage the download cache")
    cache_sub = p.add_subparsers(dest="cache_command", required=True, parser_class=_Parser)
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
        help="keep entries this manifest names; repeatable",
    )
    prune.add_argument(
        "--max-age",
        type=_days,
        default=0.0,
        metavar="DAYS",
        help="keep resumable partials younger than this for a rerun; by default every partial no "
        "running fetch holds is reclaimed (one of unknown size at any age)",
    )
    prune.add_argument("--cache-dir", type=Path)


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


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every (sub)parser below ``parser``, nested ones (``cache prune``) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from _parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every ``bake`` command (one entry of COMMANDS each)."""
    parser = _Parser(prog="bake", description="Verified asset layers for ROCm CI images.")
    parser.add_argument("--version", action="version", version=f"bake {__version__}")
    _add_verbosity(parser, False)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add_parser in COMMANDS:
        add_parser(sub)
    for command in _parsers(parser):
        _add_verbosity(command, argparse.SUPPRESS)
    return parser


def _selected(args: argparse.Namespace) -> manifest.Manifest:
    with _naming_the_variable(args.manifest):
        assets = manifest.load_manifest(args.manifest, allow_http=args.allow_http)
    for warning in manifest.near_misses(assets):
        log.warning("warning: %s", warning)
    return manifest.select(assets, args.group)


def _fetch_options(args: argparse.Namespace):
    """Return the engine's FetchOptions from the shared fetch options. Raises UsageError."""
    from bake import cache, fetch

    try:
        from_env = fetch.parse_mirrors(os.environ.get("BAKE_MIRRORS", "").split())
    except UsageError as exc:
        raise UsageError(f"BAKE_MIRRORS: {exc}; fix or unset the variable") from None
    options = FetchOptions(
        cache_dir=args.cache_dir or cache.default_cache_dir(),
        mirrors=from_env + fetch.parse_mirrors(args.mirror),
        no_origin=args.no_origin,
        connections=args.connections,
        attempts=args.attempts,
        timeout=args.timeout,
        deadline=args.deadline,
        allow_http=args.allow_http,
        ca_bundle=args.ca_bundle,
        jobs=getattr(args, "jobs", 1),
        max_size=args.max_size,
        min_free=args.min_free,
        started=fetch.process_started(),
    )
    # Under --no-origin, HF_ENDPOINT counts as a rewrite of the Hub's hf:// sources.
    if options.no_origin and not options.mirrors and not os.environ.get("HF_ENDPOINT"):
        raise UsageError("--no-origin needs at least one --mirror (or BAKE_MIRRORS); nothing could be tried")
    return options


def _progress(args: argparse.Namespace):
    """The progress sink on stderr for a command that fetches; None under -q."""
    from bake.fetch import progress

    return None if args.quiet else progress.make_progress(sys.stderr)


def cmd_fetch(args: argparse.Namespace) -> int:
    from bake import fetch

    assets = _selected(args)
    options = _fetch_options(args)
    if args.dest.exists() and not args.dest.is_dir():
        raise UsageError(f"--dest {args.dest}: exists and is not a directory")
    if args.json and str(args.json) != "-":
        _check_report_path(args.json)
    try:
        records = fetch.fetch_assets(assets, args.dest, options, _progress(args))
    except fetch.FetchFailed as exc:
        if args.json and (problem := _write_report(args.json, assets, exc.records, exc.failures)):
            exc.args = (f"{exc}\n--json {str(args.json)!r}: {problem}",)  # still one error, stated once
        raise
    index.write_index(args.dest, assets)
    if args.json and (problem := _write_report(args.json, assets, records, {})):
        raise UsageError(
            f"--json {str(args.json)!r}: {problem}; the assets are installed and verified, "
            "so rerun with a writable --json path to get the report"
        )
    if str(args.json) != "-":  # else the report on stdout is the result
        print(
            f"bake: {len(assets)} asset(s) verified under {args.dest} "
            f"(manifest digest {manifest.manifest_digest(assets)})"
        )
    return 0


def _check_report_path(path: Path) -> None:
    """Refuse a --json path that cannot be written, before any asset is fetched."""
    parent = path.parent
    if path.is_dir():
        problem = "is a directory"
    elif not parent.is_dir():
        problem = f"its directory {str(parent)!r} does not exist"
    elif not os.access(path if path.exists() else parent, os.W_OK):
        problem = "cannot be written (permissions or a read-only filesystem)"
    else:
        return
    raise UsageError(f"--json {str(path)!r}: {problem}; give a writable file path for the report")


def _write_report(path: Path, assets: list, records: list, failures: dict) -> str | None:
    """Write the per-asset report, one record per selected asset, failed ones too, to ``path``
    (``-``: stdout); return why it could not be written, or None."""
    landed = {r.name: r for r in records}
    report = []
    for asset in assets:
        if (r := landed.get(asset.name)) is not None:
            report.append(
                {
                    "name": r.name,
                    "path": r.path,
                    "ok": True,
                    "source": r.source,
                    "bytes": r.bytes,
                    "size": r.size,
                    "seconds": round(r.seconds, 3),
                    "attempts": r.attempts,
                    "cached": r.cached,
                }
            )
        elif asset.name in failures:
            report.append(
                {"name": asset.name, "path": asset.path, "ok": False, "error": str(failures[asset.name])}
            )
    text = json.dumps({"ok": not failures, "assets": report}, indent=2) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        return None
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        return f"the report could not be written ({exc.strerror or exc})"
    return None


def _assets_root(explicit: Path | None) -> Path:
    return explicit or Path(os.environ.get("BAKE_ASSETS") or DEFAULT_ASSETS)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.image is not None or args.dest is None or args.key is not None or args.repository is not None:
        return _verify_image(args)
    # Inside an image there is no manifest; the lock written at fetch time says what must be there.
    # No default manifest applies here (the contract), but BAKE_MANIFEST names one.
    args.manifest = args.manifest or (
        _FromEnv(os.environ["BAKE_MANIFEST"]) if os.environ.get("BAKE_MANIFEST") else None
    )
    if args.manifest is None:
        if args.group:
            raise UsageError("--group needs --manifest; the lock already holds only the selected assets")
        files = index.read_lock(args.dest)
        assets = None
    else:
        assets = _selected(args)
        files = index.expected_files(assets)
    verify.verify_dest(args.dest, files, assets=assets)
    print(f"bake: {len(files)} asset(s) under {args.dest} verified")
    return 0


def _verify_image(args: argparse.Namespace) -> int:
    """``bake verify --image REF --key KEY [--repository REPO]``: the image's assets proved signed."""
    from bake import signed_image

    if args.image is None or args.dest is not None or args.key is None or args.manifest or args.group:
        raise UsageError("verify takes --dest D [--manifest M], or --image REF --key KEY [--repository REPO]")
    print(signed_image.verify_image(args.image, args.key, args.repository, tlog=not args.no_tlog))
    return 0


def _print_findings(findings: list, bad_label: str, nothing_to_check: str) -> list:
    """Print one line per finding on stdout (a warning, ``nothing_to_check``, when there is none);
    return the bad ones."""
    for f in findings:
        print(f"{'ok' if f.ok else bad_label}  {f.consumer}  {f.asset}: {f.detail}")
    if not findings:
        log.warning("warning: %s; nothing was checked", nothing_to_check)  # a diagnostic, not a result
    return [f for f in findings if not f.ok]


def cmd_manifest(args: argparse.Namespace) -> int:
    from bake import consumers, layers

    assets = _selected(args)
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
    warning = layers.check_layer_budget(layers.units_of(assets))  # refuses what no image could run
    if warning:
        log.warning("%s", warning)
    table = assets.consumers()
    findings = consumers.check_manifest(assets, table)
    builtins = ", ".join(c.name for c in table if c.builtin)
    declared = ", ".join(c.name for c in table if not c.builtin)
    why = f"no consumer package ({builtins}) is installed to judge these entries"
    if declared:
        why += f"; the declared consumer(s) {declared} carry no table of their own to check entries against"
    bad = _print_findings(findings, "MISMATCH", why)
    if bad:
        raise UsageError(
            f"{len(bad)} manifest entr{'y' if len(bad) == 1 else 'ies'} disagree with the installed "
            "consumers; a job would re-download them: fix the manifest or pin the consumer version"
        )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bake import consumers

    root = _assets_root(args.assets)
    serve = root / consumers.SERVE_NAME
    # doctor takes --assets (or BAKE_ASSETS), not verify's --manifest and --dest.
    lock = index.read_lock(
        root, "point --assets (or BAKE_ASSETS) at a baked asset root, such as /opt/bake/assets"
    )
    if not serve.is_file():
        raise FetchError(
            f"--assets {root}: fetched but not sealed (no {consumers.SERVE_NAME}), so bake-entrypoint "
            f"serves nothing from it and every consumer would download: run `bake seal --manifest M "
            f"--dest {root}` after `bake fetch` in the image build"
        )
    # The image holds no manifest: declared consumers come back from what seal wrote.
    table = consumers.table(consumers.declared_from_serve(serve.read_text(encoding="utf-8")))
    findings = consumers.doctor(root, lock, table)
    libraries = [lib for c in table for lib in c.libraries] + [c.name for c in table if not c.builtin]
    bad = _print_findings(
        findings, "WOULD DOWNLOAD", f"no consumer package ({', '.join(libraries)}) is installed"
    )
    if bad:
        raise FetchError(
            f"{len(bad)} consumer lookup(s) would trigger a download; run the job through bake-entrypoint, "
            'or run the runner line first: bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
        )
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    count = seal.seal(args.dest, _selected(args), remove_stray=args.remove_stray)
    print(f"bake: sealed {count} asset(s) under {args.dest}")
    return 0


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


def _passed_on(remainder: list[str]) -> list[str]:
    """The words a command hands to docker buildx (its REMAINDER), without the ``--`` before them."""
    return remainder[1:] if remainder[:1] == ["--"] else remainder


def cmd_build(args: argparse.Namespace) -> int:
    from bake import build

    bake_args = _passed_on(args.bake_args)
    return build.run_build(
        Path(), bake_args, export=args.export, strict=args.strict, assets_image=args.assets_image
    )


def _check_image_selection(args: argparse.Namespace) -> None:
    """Refuse --runtime with --manifest or --group; otherwise default --manifest (publish and pin)."""
    if args.runtime:
        if args.manifest or args.group:
            raise UsageError("--runtime names bake's runtime image: it takes no --manifest or --group")
    else:
        args.manifest = args.manifest or _default_manifest()


def _publish_command(args: argparse.Namespace) -> str:
    """The `bake publish` command that makes what pin works on."""
    if args.runtime:
        return shlex.join(["bake", "publish", "--runtime", "--repository", args.repository])
    command = ["bake", "publish", "--manifest", args.manifest, "--repository", args.repository]
    return shlex.join(command + [word for group in args.group for word in ("--group", group)])


def cmd_publish(args: argparse.Namespace) -> int:
    from bake import publish, signing

    # publish_* check the repository and read the manifest before they ask the registry.
    _check_image_selection(args)
    buildx_args = _passed_on(args.buildx_args)
    signer = signing.signer(args.sign, tlog=not args.no_tlog) if args.sign else None  # before any build
    if args.runtime:
        runtime = publish.publish_runtime(args.repository, buildx_args)
        if signer:
            signing.sign_published(runtime, signer)
        print(runtime.pinned)
    else:
        block = publish.publish_assets(Path(args.manifest), args.repository, args.group, buildx_args)
        if signer:
            signing.sign_block(block, args.manifest, args.group, signer)
        print("\n".join(block.lines()))
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    from bake import pin, publish, signing

    _check_image_selection(args)
    manifest = None if args.runtime else args.manifest
    verifier = signing.pin_verifier(args.repository, manifest, args.verify_key, no_tlog=args.no_tlog)
    # --check proves the digests already on the lines too, before it compares them.
    lines = pin.pinned_lines(args.dockerfiles, args.repository) if verifier and args.check else []
    if args.runtime:
        runtime = publish.lookup(publish.runtime_ref(args.repository), _publish_command(args))
        if verifier:
            signing.verify_published(runtime, verifier, lines)
        pinned, block = runtime.pinned, None
    else:
        chosen = publish.lookup_block(
            Path(args.manifest), args.repository, args.group, _publish_command(args)
        )
        if verifier:
            signing.verify_block(chosen, args.manifest, args.group, verifier, lines)
        pinned = chosen.whole.pinned
        block = [pin.BlockLine(unit.name, found.pinned) for unit, found in chosen.units]
        block.append(pin.BlockLine(None, chosen.index.pinned))
    for result in pin.pin_files(args.dockerfiles, args.repository, pinned, check=args.check, block=block):
        count = len(result.references)
        if args.check:
            print(f"bake: {result.path}: {count} reference(s) to {args.repository}, all pinned")
        elif result.stale:
            print(f"bake: {result.path}: {len(result.stale)} change(s) to {count} reference(s):")
            print("\n".join(f"  {line}" for line in result.stale))
        else:
            print(f"bake: {result.path}: {count} reference(s) already pinned")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from bake import cache

    keep = None
    if args.manifest:
        keep = {a.sha256 for m in args.manifest for a in manifest.load_manifest(m, allow_http=True)}
    result = cache.prune(args.cache_dir or cache.default_cache_dir(), keep, args.max_age)
    print(f"bake: {result}")
    return 0


def _refuse(args: argparse.Namespace, options: tuple[str, ...], why: str) -> None:
    """Raise UsageError for the first of ``options`` given: this kind of target does not take it."""
    for option in options:
        if getattr(args, option, None):
            raise UsageError(f"--{option.replace('_', '-')} is for {why}")


def _add_repository(args: argparse.Namespace, options) -> int:
    """``bake add hf://ORG/REPO[@REV]``: pin a whole Hub repository, print what was pinned; exit 0, 2 or 3."""
    from bake.add import hub as hub_add

    _refuse(args, ("name", "path", "sha256", "size_only"), f"one file; {args.target} pins a whole repository")
    pinned = hub_add.pin_repository(
        Path(args.manifest),
        args.target,
        options,
        repo_type=args.repo_type,
        include=args.include,
        exclude=args.exclude,
        groups=args.group,
        downloader=args.downloader,
    )
    print(
        f"bake: pinned {pinned.url} at {pinned.commit}: {pinned.files} file(s), {pinned.total} bytes, "
        f"in {pinned.manifest}",
        file=sys.stderr,
    )
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from bake import add

    options = _fetch_options(args)
    if args.target.startswith("hf://"):
        from bake.add import hub as hub_add

        if hub_add.is_repo_url(args.target):  # hf://ORG/REPO[@REV]: a whole Hub repository, [[hub]]
            return _add_repository(args, options)
    _refuse(
        args,
        ("include", "exclude", "repo_type", "downloader"),
        f"hf://ORG/REPO[@REV]; {args.target} is one file",
    )
    path = Path(args.manifest)
    if args.size_only:
        if args.name or args.path or args.sha256 or args.group:
            raise UsageError("--size-only takes only an asset NAME and fetch options")
        asset = add.fill_size(path, args.target, options, _progress(args))
        print(f"bake: {asset.name}: size = {asset.size} in {path}")
        return 0
    with _naming_the_variable(args.manifest):
        asset = add.add(
            path,
            args.target,
            options,
            name=args.name,
            path=args.path,
            groups=args.group,
            sha256=args.sha256,
            progress=_progress(args),
        )
    print(f"bake: added {asset.name} ({asset.path}, {asset.size} bytes, sha256 {asset.sha256}) to {path}")
    return 0


def _add_harvest_parser(sub: argparse._SubParsersAction) -> None:
    from bake.harvest import command  # its options, output and exit codes live with it

    command.add_parser(sub)


# The exit codes each command may return (the contract's table; README.md's is checked against it).
# Every command exits 2 for a usage error.
EXIT_CODES: dict[str, tuple[int, ...]] = {
    "add": (0, 2, 3),
    "harvest": (0, 1, 2, 3),
    "fetch": (0, 2, 3),
    "verify": (0, 2, 3),
    "manifest": (0, 2),
    "doctor": (0, 2, 3),
    "seal": (0, 2, 3),
    "check-context": (0, 1, 2, 4),
    "build": (0, 1, 2, 4, 5),
    "publish": (0, 2, 5),
    "pin": (0, 1, 2, 5),
    "cache": (0, 2),
    "--version": (0,),
}

# A command is a function that adds its sub-parser (with ``run`` set to its handler), listed here,
# and its exit codes in EXIT_CODES.
COMMANDS = [
    _add_add_parser,
    _add_harvest_parser,
    _add_fetch_parser,
    _add_verify_parser,
    _add_manifest_parser,
    _add_doctor_parser,
    _add_seal_parser,
    _add_check_context_parser,
    _add_build_parser,
    _add_publish_parser,
    _add_pin_parser,
    _add_cache_parser,
]


# Every message bake prints passes one of these two, so text from servers, URLs and
# paths reaches the terminal with its control characters escaped (bake.text.escape).
def _print_error(exc: BakeError) -> None:
    print(f"bake: error: {escape(str(exc), keep_layout=True)}", file=sys.stderr)


class _EscapingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return escape(super().format(record), keep_layout=True)


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        _print_error(exc)
        return exc.exit_code
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_EscapingFormatter("bake: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    try:
        return args.run(args)
    except BakeError as exc:
        _print_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "bake: interrupted; partial downloads stay in the cache and a rerun resumes them", file=sys.stderr
        )
        return 130

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

from bake import __version__, index, manifest, report, seal, usage, verify
from bake.byte_sizes import GIB, KIB, MIB, TIB, shown_size
from bake.control_chars import escape
from bake.errors import BakeError, FetchError, ManifestError, Problem, UsageError, VerifyError
from bake.fetch import FetchOptions
from bake.fetch.clock import DEADLINE_RULE
from bake.fetch.options import MIN_FREE_RULE

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
        kwargs.setdefault("formatter_class", usage.HelpFormatter)
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
        if " not allowed with argument " in message:
            # Two options that exclude each other (-q and -v): argparse stops there, before any
            # command read its own options, so nothing else on the line can be judged.
            misspelt = []
        if choice := _INVALID_CHOICE.search(message):
            # A misspelt command (or action): the closest one, as git and pip suggest it.
            word, choices = choice.group(1), re.findall(r"[\w-]+", choice.group(2))
            close = difflib.get_close_matches(word, choices, n=1)
            kind = "command" if re.match(r"argument (COMMAND|ACTION):", message) else "choice"
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


_SELECT_HELP = "select assets in group G plus shared assets; repeatable; default every asset"


MANIFEST_DEFAULT_RULE = f"$BAKE_MANIFEST, else {manifest.DEFAULT_MANIFEST}"


class _FromEnv(str):
    """A manifest path that BAKE_MANIFEST gave, so that an error about it can name the variable."""


class _Default(str):
    """The default manifest path, which neither --manifest nor BAKE_MANIFEST gave."""


def _default_manifest() -> str:
    """The manifest a command reads when --manifest is not given: BAKE_MANIFEST names it (round 4)."""
    named = os.environ.get("BAKE_MANIFEST")
    return _FromEnv(named) if named else _Default(manifest.DEFAULT_MANIFEST)


def _no_default_manifest(path: str) -> ManifestError:
    return ManifestError(
        f"no --manifest given, and the default manifest {path} is not in {os.getcwd()}: pass "
        "--manifest M, or set BAKE_MANIFEST=M (or run from the checkout that holds it)"
    )


@contextlib.contextmanager
def _naming_the_variable(path: str, *, starts: bool = False) -> Iterator[None]:
    """Say where the manifest an error is about came from: BAKE_MANIFEST, or the default that is not
    there (neither option nor variable was given). ``starts``: the command starts a missing manifest
    (bake add), so only a missing directory means the default is not where the user thinks."""
    try:
        yield
    except UsageError as exc:
        absent = isinstance(path, _Default) and not os.path.lexists(path)
        if absent and starts and not os.path.isdir(os.path.dirname(path) or "."):
            raise _no_default_manifest(path) from None  # it could not be started there
        if absent and not starts and isinstance(exc, ManifestError):
            raise _no_default_manifest(path) from None  # reading the manifest is what failed
        if not isinstance(path, _FromEnv) or not isinstance(exc, ManifestError):
            raise
        raise ManifestError(f"{exc} (BAKE_MANIFEST names it: fix the variable, or pass --manifest)") from None


def _add_selection(p: argparse.ArgumentParser, *, default_manifest: bool = False) -> None:
    p.add_argument(
        "--manifest",
        default=_default_manifest() if default_manifest else None,
        help=f"asset manifest (TOML); default {MANIFEST_DEFAULT_RULE}",
    )
    _add_group(p, _SELECT_HELP)
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
        help="rewrite URLs; tried before the original; repeatable; also BAKE_MIRRORS; default none",
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
        # argparse formats help with %: the rule's "5%" must reach it as "5%%".
        help="such a file stops before its filesystem has less than SIZE free "
        f"(default {MIN_FREE_RULE.replace('%', '%%')})",
    )


def _add_fetch_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="download, verify and install every selected asset")
    p.set_defaults(run=cmd_fetch)
    _add_selection(p, default_manifest=True)
    p.add_argument("--dest", required=True, type=Path, help="directory that receives the assets")
    _add_fetch_options(p)
    _add_fetch_limit(p, "--jobs", _positive_int, "assets fetched at once")
    _add_json(p)


def _add_add_parser(sub: argparse._SubParsersAction) -> None:
    add = sub.add_parser("add", help="fetch a new file once and append its complete entry to the manifest")
    add.set_defaults(run=cmd_add)
    add.add_argument("target", metavar="URL", help="the file's URL (with --size-only: an asset NAME)")
    add.add_argument("--name", help="the entry's name; default from the URL or the consumer's naming rule")
    add.add_argument("--path", help="the entry's path; default from the owning consumer's naming rule")
    add.add_argument(
        "--sha256",
        metavar="H",
        help="the bytes must hash to H, else exit 3 and nothing is written; default: any bytes, hashed",
    )
    add.add_argument(
        "--size-only", action="store_true", help="fill in the missing size of the existing entry NAME"
    )
    add.add_argument(
        "--manifest",
        default=_default_manifest(),
        help=f"manifest to edit; default {MANIFEST_DEFAULT_RULE} (started if missing)",
    )
    _add_group(add, "put the entry in group G; repeatable; default no group (a shared asset)")
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
        help="only files matching P (fnmatch); repeatable; default every file",
    )
    add.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="P",
        help="skip files matching P (fnmatch); repeatable; default none",
    )
    add.add_argument("--repo-type", choices=hub_entry.KINDS, help="model (default) or dataset")
    add.add_argument(
        "--downloader",
        choices=hub_entry.DOWNLOADERS,
        help=f"how fetch gets the bytes (default {hub_entry.DEFAULT_DOWNLOADER}; recorded only if different)",
    )


def _add_verify_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check the files under --dest against --manifest, or against D/bake.lock.json",
        description="Check that every selected file under --dest is present, regular, of its size and "
        "sha256 (and a sealed tree's links). Without --manifest (or BAKE_MANIFEST) it checks against "
        "the lock that fetch wrote, D/bake.lock.json; no default manifest applies. With --image REF "
        "--key KEY instead: prove a built image's assets published signed with KEY (docs/building.md, "
        "Signing).",
    )
    p.set_defaults(run=cmd_verify)
    p.add_argument(
        "--manifest",
        help="check against this manifest (TOML); default $BAKE_MANIFEST, else the lock D/bake.lock.json",
    )
    _add_group(p, "with --manifest: check group G plus shared assets; repeatable; default every asset")
    p.add_argument(
        "--allow-http", action="store_true", help="with --manifest: allow its plain http:// non-loopback URLs"
    )
    p.add_argument(
        "--dest",
        type=Path,
        metavar="D",
        help="the directory fetch filled (no default: it or --image is needed)",
    )
    _add_json(p)
    p.add_argument(
        "--image",
        metavar="REF",
        help="instead of --dest: prove an image's assets published signed with --key (default: check --dest)",
    )
    p.add_argument(
        "--key", metavar="KEY", help="with --image: the public key, a file or a KMS URI (no default)"
    )
    p.add_argument(
        "--repository",
        metavar="REPO",
        help="with --image: where the assets were published (default: the image's own repository)",
    )
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
    p.add_argument(
        "--assets",
        type=Path,
        default=None,
        help=f"baked asset root; default $BAKE_ASSETS, else {DEFAULT_ASSETS}",
    )
    _add_json(p)


def _add_seal_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("seal", help="image-build step: add encoding links, make the tree read-only")
    p.set_defaults(run=cmd_seal)
    _add_selection(p, default_manifest=True)
    p.add_argument("--dest", required=True, type=Path, help="the directory fetch filled")
    p.add_argument(
        "--remove-stray",
        action="store_true",
        help="remove files under --dest that no selected asset accounts for (seal refuses them otherwise)",
    )


def _add_check_context_parser(sub: argparse._SubParsersAction) -> None:
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


def _add_build_parser(sub: argparse._SubParsersAction) -> None:
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


def _add_image_selection(p: argparse.ArgumentParser) -> None:
    """What publish and pin name: the assets of a manifest (and groups) in REPO, or bake's runtime."""
    p.add_argument(
        "--manifest", help=f"asset manifest (TOML); default {MANIFEST_DEFAULT_RULE}; not with --runtime"
    )
    p.add_argument("--repository", required=True, metavar="REPO", help="the image repository, no tag")
    _add_group(p, "bake group G plus shared assets; repeatable; default every asset")
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
        help="sign each image and attest each unit's files with cosign: a private key file or a KMS URI "
        "(default: no signing)",
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
    p.add_argument(
        "dockerfiles", nargs="+", type=Path, metavar="DOCKERFILE", help="the Dockerfiles to rewrite"
    )


def _add_cache_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="manage the download cache")
    cache_sub = p.add_subparsers(
        dest="cache_command", required=True, parser_class=_Parser, metavar="ACTION", help="one of:"
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


def _add_completion_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "completion",
        help="print a completion script for bash or zsh, generated from this parser (needs shtab)",
        description="Print the shell completion script for SHELL. Install it once, for example:\n"
        "  bake completion bash > ~/.local/share/bash-completion/completions/bake\n"
        '  bake completion zsh > "${fpath[1]}/_bake"   # a directory on your $fpath',
    )
    p.set_defaults(run=cmd_completion)
    p.add_argument("shell", choices=usage.SHELLS, help="the shell to complete in")


def cmd_completion(args: argparse.Namespace) -> int:
    print(usage.completion(build_parser(), args.shell), end="")
    return 0


def _add_json(p: argparse.ArgumentParser) -> None:
    """``--json REPORT``: the command's result as JSON, complete on failure too."""
    p.add_argument(
        "--json",
        type=Path,
        metavar="REPORT",
        help="also write the result as JSON (schema: docs/json.md) to REPORT, - for stdout, failures "
        "too; default: no JSON",
    )


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


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every ``bake`` command (one entry of COMMANDS each).

    Each command's help ends with the variables it reads and its exit codes (EXIT_CODES).
    """
    parser = _Parser(prog="bake", description="Verified asset layers for ROCm CI images.")
    parser.add_argument(
        "--version", action="version", version=f"bake {__version__}", help="print the version"
    )
    _add_verbosity(parser, False)
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND", help="one of:"
    )
    for add_parser in COMMANDS:
        add_parser(sub)
    parser.epilog = usage.epilog(sorted({c for codes in EXIT_CODES.values() for c in codes}), ())
    for words, command in usage.parsers(parser):
        if words:
            _add_verbosity(command, argparse.SUPPRESS)
            command.epilog = usage.epilog(EXIT_CODES.get(words[0], (0, 2)), ENVIRONMENT.get(words[0], ()))
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
    body = _report_body(args, dest=str(args.dest), manifest_digest=manifest.manifest_digest(assets))
    options = _fetch_options(args)
    if args.dest.exists() and not args.dest.is_dir():
        raise UsageError(f"--dest {args.dest}: exists and is not a directory")
    chosen = " ".join(f"--group {g}" for g in args.group) or "every asset"
    if warning := index.other_selection(args.dest, list(assets), chosen):
        log.warning("warning: %s", warning)
    try:
        records = fetch.fetch_assets(assets, args.dest, options, _progress(args))
    except fetch.FetchFailed as exc:
        body["assets"] = report.fetched(assets, exc.records, set(exc.failures))
        raise
    body["assets"] = report.fetched(assets, records, set())
    index.write_index(args.dest, assets)
    print(
        f"bake: {len(assets)} asset(s) verified under {args.dest} "
        f"(manifest digest {body['manifest_digest']})",
        file=_out(args),
    )
    return 0


def _report_body(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    return report.body_of(args.report, **fields)


def _out(args: argparse.Namespace):
    return report.results_stream(args.report)


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
    body = _report_body(args, dest=str(args.dest), against=str(args.dest / index.LOCK_NAME))
    if args.manifest is None:
        if args.group:
            raise UsageError("--group needs --manifest; the lock already holds only the selected assets")
        files = index.read_lock(args.dest)
        assets = None
    else:
        assets = _selected(args)
        files = index.expected_files(assets)
        body.update(against=str(args.manifest), manifest_digest=manifest.manifest_digest(assets))
    names = {a.path: a.name for a in assets or ()}
    bad: set[str | None] = set()
    try:
        verify.verify_dest(args.dest, files, assets=assets)
    except VerifyError as exc:
        bad = {p.path for p in exc.problems}
        raise
    finally:
        body["assets"] = [
            {
                "name": names.get(f.path),
                "path": f.path,
                "sha256": f.sha256,
                "size": f.size,
                "ok": f.path not in bad,
            }
            for f in files
        ]
    print(f"bake: {len(files)} asset(s) under {args.dest} verified", file=_out(args))
    return 0


def _verify_image(args: argparse.Namespace) -> int:
    """``bake verify --image REF --key KEY [--repository REPO]``: the image's assets proved signed."""
    from bake import signed_image

    if args.image is None or args.dest is not None or args.key is None or args.manifest or args.group:
        raise UsageError("verify takes --dest D [--manifest M], or --image REF --key KEY [--repository REPO]")
    if args.json is not None or args.allow_http:
        raise UsageError("--json and --allow-http apply to verify --dest; verify --image prints one line")
    print(signed_image.verify_image(args.image, args.key, args.repository, tlog=not args.no_tlog))
    return 0


def _print_findings(args: argparse.Namespace, findings: list, not_asked: list, nothing_to_check: str) -> list:
    """Print one ``VERDICT  LIBRARY  ASSET: DETAIL`` line per finding on stdout, and on stderr each library
    that could not be asked (and ``nothing_to_check`` when there is no finding); return the bad ones.

    ``doctor`` and ``manifest check`` print their findings so: one verdict and one name per library."""
    for f in findings:
        print(f"{f.verdict}  {f.consumer}  {f.asset}: {f.detail}", file=_out(args))
    for library, why in not_asked:
        log.warning("could not ask %s: %s", library, why)  # a diagnostic, not a result
    if not findings:
        log.warning("warning: %s; nothing was checked", nothing_to_check)
    return [f for f in findings if not f.ok]


def _finding_record(f) -> dict[str, Any]:
    keys = ("verdict", "consumer", "asset", "ok", "detail", "expected", "seen")
    record = {key: getattr(f, key) for key in keys}
    record["library"] = record.pop("consumer")
    return record


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
    bad = _print_findings(args, findings, unasked, why)
    if bad:
        raise UsageError(
            f"{len(bad)} manifest entr{'y' if len(bad) == 1 else 'ies'} disagree with the installed "
            "consumers; a job would re-download them: fix the manifest or pin the consumer version"
        )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bake import consumers

    root = _assets_root(args.assets)
    body = _report_body(args, assets_root=str(root))
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
    unasked = consumers.not_asked(table, [f.path for f in lock])
    body["findings"] = [_finding_record(f) for f in findings]
    body["not_asked"] = [{"library": lib, "why": why} for lib, why in unasked]
    owners = ", ".join(c.name for c in table)
    bad = _print_findings(args, findings, unasked, f"no baked file belongs to a consumer ({owners})")
    if bad:
        raise _doctor_failure(bad)
    return 0


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
        with _naming_the_variable(args.manifest):  # the repository is checked before the manifest is read
            block = publish.publish_assets(Path(args.manifest), args.repository, args.group, buildx_args)
            if signer:
                signing.sign_block(block, args.manifest, args.group, signer)
        print("\n".join(block.lines()))
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    from bake import pin, publish, signing

    _check_image_selection(args)
    manifest = None if args.runtime else args.manifest
    with _naming_the_variable(manifest):  # its [signing] table names the default key
        verifier = signing.pin_verifier(args.repository, manifest, args.verify_key, no_tlog=args.no_tlog)
    # --check proves the digests already on the lines too, before it compares them.
    lines = pin.pinned_lines(args.dockerfiles, args.repository) if verifier and args.check else []
    if args.runtime:
        runtime = publish.lookup(publish.runtime_ref(args.repository), _publish_command(args))
        if verifier:
            signing.verify_published(runtime, verifier, lines)
        pinned, block = runtime.pinned, None
    else:
        with _naming_the_variable(args.manifest):
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
    result = cache.prune(
        args.cache_dir or cache.default_cache_dir(), keep, args.max_age, dry_run=args.dry_run
    )
    for path in result.removed:
        print(f"{'would remove' if args.dry_run else 'removed'} {escape(str(path))}")
    print(f"bake: {result}")
    return 0


def _refuse(args: argparse.Namespace, options: tuple[str, ...], why: str) -> None:
    """Raise UsageError for the first of ``options`` given: this kind of target does not take it."""
    for option in options:
        if getattr(args, option, None):
            raise UsageError(f"--{option.replace('_', '-')} is for {why}")


def _add_repository(args: argparse.Namespace, options) -> int:
    """``bake add hf://ORG/REPO[@REV]``: pin a whole Hub repository, print what was pinned; exit 0, 2 or 3."""
    from bake.add import hub_repo as hub_add

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
        from bake.add import hub_repo as hub_add

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
    with _naming_the_variable(args.manifest, starts=True):
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


def _add_seed_parser(sub: argparse._SubParsersAction) -> None:
    from bake.seed import command  # its options, its result line and exit codes live with it

    command.add_parser(sub)


# The exit codes each command may return (the contract's table; README.md's is checked against it).
# Every command exits 2 for a usage error.
EXIT_CODES: dict[str, tuple[int, ...]] = {
    "add": (0, 2, 3),
    "harvest": (0, 1, 2, 3),
    "seed": (0, 2, 3, 6),
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
    "completion": (0, 2),
    "--version": (0,),
}

# The variables each command reads (usage.VARIABLES says what each does), for its --help.
_FETCHING = (
    "BAKE_MANIFEST",
    "BAKE_MIRRORS",
    "HTTPS_PROXY",
    "SSL_CERT_FILE",
    "HF_TOKEN",
    "HF_ENDPOINT",
    "XDG_CACHE_HOME",
    "HF_HUB_DISABLE_PROGRESS_BARS",
)
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "add": _FETCHING,
    "harvest": ("BAKE_MANIFEST", "BAKE_ASSETS"),
    "seed": ("BAKE_ASSETS",),
    "fetch": _FETCHING,
    "verify": ("BAKE_MANIFEST",),
    "manifest": ("BAKE_MANIFEST",),
    "doctor": ("BAKE_ASSETS", "TIKTOKEN_RS_CACHE_DIR"),
    "seal": ("BAKE_MANIFEST",),
    "publish": (
        "BAKE_MANIFEST",
        "BAKE_MIRRORS",
        "BAKE_FETCH_ARGS",
        "HF_TOKEN",
        "HF_ENDPOINT",
        "SSL_CERT_FILE",
    ),
    "pin": ("BAKE_MANIFEST",),
    "cache": ("XDG_CACHE_HOME",),
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
    _add_seed_parser,
    _add_completion_parser,
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
    args.report = None
    try:
        args.report = _report_for(args)
        code = args.run(args)
    except BakeError as exc:
        _end_report(args.report, exc.exit_code, exc)
        _print_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        stop = "interrupted; partial downloads stay in the cache and a rerun resumes them"
        _end_report(args.report, 130, BakeError(stop))
        print(f"bake: {stop}", file=sys.stderr)
        return 130
    if args.report is not None and (problem := args.report.write(code)):
        done = "the assets are installed and verified" if args.command == "fetch" else f"it exited {code}"
        _print_error(
            UsageError(
                f"--json {args.report.target!r}: {problem}; the command did its work ({done}), "
                "so rerun with a writable --json path to get the report"
            )
        )
        return UsageError.exit_code
    return code


def _report_for(args: argparse.Namespace) -> report.Report | None:
    """The JSON report ``--json`` asks for, its path checked before the command does anything; or None."""
    target = getattr(args, "json", None)
    if target is None:
        return None
    command = args.command
    if command == "harvest":
        if args.diff is None:
            raise UsageError("--json reports harvest --diff; a harvest that pins writes the manifest instead")
        command = "harvest --diff"
    found = report.Report(command, str(target))
    found.check_target()
    return found


def _end_report(rep: report.Report | None, code: int, exc: BakeError) -> None:
    """Write the report of a command that failed with ``exc``; a report that cannot be written is said
    in the same error, so the failure is still stated once."""
    if rep is None:
        return
    rep.failed(exc)
    if problem := rep.write(code):
        exc.args = (f"{exc}\n--json {rep.target!r}: {problem}",)

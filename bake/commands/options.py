"""The options several commands share: how each is parsed, and what it turns into (the selected
manifest, the fetch engine's options, the progress sink, the results stream)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bake import manifest, report
from bake.byte_sizes import GIB, KIB, MIB, TIB, shown_size
from bake.errors import ManifestError, UsageError
from bake.fetch import FetchOptions
from bake.fetch.clock import DEADLINE_RULE
from bake.fetch.options import MIN_FREE_RULE

log = logging.getLogger("bake")

# The variables every command that fetches reads (usage.VARIABLES says what each does).
FETCHING_VARIABLES = (
    "BAKE_MANIFEST",
    "BAKE_MIRRORS",
    "HTTPS_PROXY",
    "SSL_CERT_FILE",
    "HF_TOKEN",
    "HF_ENDPOINT",
    "XDG_CACHE_HOME",
    "HF_HUB_DISABLE_PROGRESS_BARS",
)

# Upper bounds that keep each number inside what threads, sockets and timers accept
# (Python's timeouts overflow near 2**63 ns); far above any sensible setting.
_MAX_COUNT = 1024
_MAX_SECONDS = 10**6


def number(kind: Callable[[str], float], text: str, expected: str) -> float:
    """``kind(text)`` within the bounds the caller checks; argparse names the option in the message."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def positive_int(text: str) -> int:
    expected = f"a whole number from 1 to {_MAX_COUNT}"
    value = number(int, text, expected)
    if not 1 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
    return value


def _positive_float(text: str) -> float:
    expected = f"a number of seconds above 0 and at most {_MAX_SECONDS}"
    value = number(float, text, expected)
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


def add_group(p: argparse.ArgumentParser, help_text: str) -> None:
    """``--group G``, repeatable: every command that selects or writes groups takes it alike."""
    p.add_argument("--group", action="append", default=[], metavar="G", help=help_text)


_SELECT_HELP = "select assets in group G plus shared assets; repeatable; default every asset"


MANIFEST_DEFAULT_RULE = f"$BAKE_MANIFEST, else {manifest.DEFAULT_MANIFEST}"


class FromEnv(str):
    """A manifest path that BAKE_MANIFEST gave, so that an error about it can name the variable."""


class _Default(str):
    """The default manifest path, which neither --manifest nor BAKE_MANIFEST gave."""


def default_manifest_path() -> str:
    """The manifest a command reads when --manifest is not given: BAKE_MANIFEST names it (round 4)."""
    named = os.environ.get("BAKE_MANIFEST")
    return FromEnv(named) if named else _Default(manifest.DEFAULT_MANIFEST)


def _no_default_manifest(path: str) -> ManifestError:
    return ManifestError(
        f"no --manifest given, and the default manifest {path} is not in {os.getcwd()}: pass "
        "--manifest M, or set BAKE_MANIFEST=M (or run from the checkout that holds it)"
    )


@contextlib.contextmanager
def naming_the_variable(path: str | None, *, starts: bool = False) -> Iterator[None]:
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
        if not isinstance(path, FromEnv) or not isinstance(exc, ManifestError):
            raise
        raise ManifestError(f"{exc} (BAKE_MANIFEST names it: fix the variable, or pass --manifest)") from None


def add_selection(p: argparse.ArgumentParser, *, default_manifest: bool = False) -> None:
    """``--manifest``, ``--group`` and ``--allow-http``: the assets a command works on."""
    p.add_argument(
        "--manifest",
        default=default_manifest_path() if default_manifest else None,
        help=f"asset manifest (TOML); default {MANIFEST_DEFAULT_RULE}",
    )
    add_group(p, _SELECT_HELP)
    p.add_argument("--allow-http", action="store_true", help="allow plain http:// to non-loopback hosts")


def selected(args: argparse.Namespace) -> manifest.Manifest:
    """The manifest ``--manifest`` names, its near misses warned of, narrowed to ``--group``.

    Raises ManifestError (naming BAKE_MANIFEST where it gave the path) or UsageError."""
    with naming_the_variable(args.manifest):
        assets = manifest.load_manifest(args.manifest, allow_http=args.allow_http)
    for warning in manifest.near_misses(assets):
        log.warning("warning: %s", warning)
    return manifest.select(assets, args.group)


def add_fetch_limit(p: argparse.ArgumentParser, flag: str, kind: Callable, help_text: str) -> None:
    """A numeric fetch option whose default is FetchOptions' own, so the parser never restates it."""
    default = {f.name: f.default for f in dataclasses.fields(FetchOptions)}[flag[2:]]
    shown = "" if default is None else " (default %(default)s)"
    p.add_argument(flag, type=kind, default=default, help=help_text + shown)


def add_fetch_options(p: argparse.ArgumentParser) -> None:
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
    add_fetch_limit(p, "--connections", positive_int, "connections per asset")
    add_fetch_limit(p, "--attempts", positive_int, "attempts per source")
    add_fetch_limit(p, "--timeout", _positive_float, "connect and stall timeout in seconds")
    add_fetch_limit(
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


def fetch_options(args: argparse.Namespace) -> FetchOptions:
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


def progress_sink(args: argparse.Namespace):
    """The progress sink on stderr for a command that fetches; None under -q."""
    from bake.fetch import progress

    return None if args.quiet else progress.make_progress(sys.stderr)


def add_json(p: argparse.ArgumentParser) -> None:
    """``--json REPORT``: the command's result as JSON, complete on failure too."""
    p.add_argument(
        "--json",
        type=Path,
        metavar="REPORT",
        help="also write the result as JSON (schema: docs/json.md) to REPORT, - for stdout, failures "
        "too; default: no JSON",
    )


def report_body(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    """The command's part of its ``--json`` report (a throwaway dict without --json)."""
    return report.body_of(args.report, **fields)


def out(args: argparse.Namespace):
    """Where a command prints its results: stdout, or stderr when the report goes to stdout."""
    return report.results_stream(args.report)


def add_no_tlog(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-tlog",
        action="store_true",
        help="no transparency log: cosign's --tlog-upload=false to sign, --insecure-ignore-tlog to verify",
    )


def add_image_selection(p: argparse.ArgumentParser) -> None:
    """What publish and pin name: the assets of a manifest (and groups) in REPO, or bake's runtime."""
    p.add_argument(
        "--manifest", help=f"asset manifest (TOML); default {MANIFEST_DEFAULT_RULE}; not with --runtime"
    )
    p.add_argument("--repository", required=True, metavar="REPO", help="the image repository, no tag")
    add_group(p, "bake group G plus shared assets; repeatable; default every asset")
    p.add_argument(
        "--runtime", action="store_true", help="bake's runtime image (tini, bake-entrypoint, bake) instead"
    )


def check_image_selection(args: argparse.Namespace) -> None:
    """Refuse --runtime with --manifest or --group; otherwise default --manifest (publish and pin)."""
    if args.runtime:
        if args.manifest or args.group:
            raise UsageError("--runtime names bake's runtime image: it takes no --manifest or --group")
    else:
        args.manifest = args.manifest or default_manifest_path()


def passed_on(remainder: list[str]) -> list[str]:
    """The words a command hands to docker buildx (its REMAINDER), without the ``--`` before them."""
    return remainder[1:] if remainder[:1] == ["--"] else remainder

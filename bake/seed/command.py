"""The ``bake seed`` command: its options, its one result line, and its exit codes.

``bake-entrypoint`` runs it, and reads both the exit code and the line on stdout:

| exit | line | meaning |
|---|---|---|
| 0 | ``served: NOTE`` | LOCATION serves every baked file from node storage (NOTE: copied, waited) |
| 6 | ``left as is: REASON`` | not served; node storage left as it is (unwritable, no space, BAKE_SEED=0) |
| 6 | ``served job-local: REASON`` | not served: the wait ran out, or something is in the way |
| 3 | ``left as is: REASON`` | a copy did not hash as bake.serve says: the image's file is damaged |
| 3 | (an error on stderr) | ``--verify``: a file does not hash as baked |
| 2 | (an error on stderr) | usage, or a bake.serve without this consumer |
| 128+N | none | ended by signal N (TERM, INT, HUP), its partial removed |

Before the line, ``refused<TAB>N<TAB>RULE`` for each per-file line of bake.serve its reader refused
(the entrypoint reads only the file's head, so these are the only reports of them).

Other modes, for the entrypoint's other Python steps: ``--verify`` with no LOCATION checks the
asset directory against SHA256SUMS (3 naming each file that fails); ``--linked`` proves a linked
view file by file (0 ``served: …``, or 6 ``served job-local: NAME is …``), and hashes it with
``--verify``; ``--view TMPDIR --var VAR [--sub SUB]`` makes a job-local view of LOCATION and prints
``view: PATH`` (0).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from bake.control_chars import escape
from bake.errors import UsageError
from bake.seed import checks, plan, seeder, view

NAME = "seed"
EXIT_CODES = (0, 2, 3, 6)
ENVIRONMENT = ("BAKE_ASSETS",)

DEFAULT_ASSETS = "/opt/bake/assets"
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(BaseException):
    """TERM, INT or HUP arrived (to this process, or as its parent's death signal)."""


def options(p: argparse.ArgumentParser) -> None:
    """The options of ``bake seed``, on its sub-parser or on the stand-alone one ``main`` uses."""
    p.add_argument(
        "location", nargs="?", type=Path, metavar="LOCATION", help="a consumer location in node storage"
    )
    p.add_argument(
        "--assets", type=Path, help=f"the asset directory (default $BAKE_ASSETS or {DEFAULT_ASSETS})"
    )
    p.add_argument(
        "--consumer",
        metavar="NAME",
        help="the consumer whose files LOCATION serves (bake.serve); required with LOCATION, no default",
    )
    p.add_argument("--no-copy", action="store_true", help="prove only, never copy (BAKE_SEED=0)")
    p.add_argument("--verify", action="store_true", help="also hash what LOCATION serves (BAKE_VERIFY=1)")
    p.add_argument("--linked", action="store_true", help="LOCATION is a linked view: prove it file by file")
    p.add_argument(
        "--view",
        type=Path,
        metavar="TMPDIR",
        help="make a job-local view of LOCATION under TMPDIR (default: seed LOCATION itself)",
    )
    p.add_argument("--var", help="with --view: the variable the view is for (default: none named)")
    p.add_argument(
        "--sub", default="", help="with --view: the consumer's SUB under LOCATION (default: LOCATION itself)"
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``seed`` to the CLI's sub-parsers."""
    p = sub.add_parser(
        "seed", help="job start (bake-entrypoint): copy a consumer's baked files into node storage"
    )
    options(p)
    p.set_defaults(run=cmd_seed)


def main(argv: list[str]) -> int:
    """``python -m bake seed ARGS``: the entrypoint's path, without loading the rest of the CLI."""
    p = argparse.ArgumentParser(prog="bake seed")
    options(p)
    return cmd_seed(p.parse_args(argv))


def cmd_seed(args: argparse.Namespace) -> int:
    try:
        _end_with_parent()
        return _run(args)
    except UsageError as exc:
        print(f"bake: error: {escape(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as sig:
        return 128 + sig.args[0]


def _run(args: argparse.Namespace) -> int:
    assets = (args.assets or Path(os.environ.get("BAKE_ASSETS") or DEFAULT_ASSETS)).absolute()
    if args.location is None:
        if not args.verify:
            raise UsageError(
                "expected LOCATION, or --verify to check the asset directory; see bake seed --help"
            )
        problems = checks.asset_problems(assets)
        for problem in problems:
            print(f"bake: error: {problem}", file=sys.stderr)
        return 3 if problems else 0
    if not args.consumer:
        raise UsageError("expected --consumer NAME with LOCATION, the consumer bake.serve names")
    records = plan.load(assets, args.consumer)
    if args.view is None:
        for number, why in records.refused:  # the entrypoint reports each once, and counts it unserved
            print(f"refused\t{number}\t{why}")
    if args.view is not None:
        return _view(args, records)
    if args.linked:
        return _linked(args, records)
    request = seeder.Request(
        args.location.absolute(), records, assets, copy=not args.no_copy, verify=args.verify
    )
    outcome = seeder.seed(request)
    if outcome.kind == seeder.FAILED:
        print(f"bake: error: {outcome.text}", file=sys.stderr)
        return outcome.code
    if outcome.planted:
        print(
            f"bake: warning: {args.location}: {outcome.text}; served job-local for this job; remove it",
            file=sys.stderr,
        )
    print(f"{outcome.kind}: {outcome.text}")
    return outcome.code


def _linked(args: argparse.Namespace, records: plan.Records) -> int:
    """A linked view: every file it serves there, through its link, of the baked size (and hash, --verify)."""
    where = str(args.location)
    missing = plan.look_linked(where, records)
    if missing:
        name, why = missing[0]
        print(f"served job-local: {where}/{name} is {why}")
        return 6
    if args.verify:
        problem = checks.served_problem(-1, where, records.linked(), linked=True)
        if problem:
            print(f"bake: error: {problem}", file=sys.stderr)
            return 3
    print(f"served: {len(records.linked())} file(s) in place")
    return 0


def _view(args: argparse.Namespace, records: plan.Records) -> int:
    if not args.var or (args.sub and not all(p not in ("", ".", "..") for p in args.sub.split("/"))):
        raise UsageError("--view needs --var VAR, and --sub as plain relative components")
    try:
        made = view.make(args.view, args.var, args.location, args.sub, records.top_names())
    except OSError as exc:
        print(f"left as is: no job-local view under {args.view} ({exc.strerror or exc})")
        return 6
    print(f"view: {made}")
    return 0


def _on_signal(signum: int, frame: object) -> None:
    for sig in _SIGNALS:  # one signal ends it: the clean-up that follows runs to its end
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def _end_with_parent() -> None:
    """End on TERM, INT or HUP, removing what this process made; and on its parent's death (the
    entrypoint killed by its pid alone) as on TERM: prctl(PR_SET_PDEATHSIG), then a check that the
    parent did not die before it was set."""
    for sig in _SIGNALS:
        signal.signal(sig, _on_signal)
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # no prctl here (not Linux): TERM to this process still ends it cleanly
    if os.getppid() != parent:
        raise Interrupted(signal.SIGTERM)

"""``bake pin``: rewrite every reference to a repository in Dockerfiles to the published image, pinned by
digest (the block of unit lines too), optionally proved signed first; ``--check`` writes nothing."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from bake.commands import options

NAME = "pin"
EXIT_CODES = (0, 1, 2, 5)
ENVIRONMENT = ("BAKE_MANIFEST",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``pin`` to the CLI's sub-parsers."""
    p = sub.add_parser(
        "pin", help="rewrite every reference to REPO in Dockerfiles to the published image, pinned by digest"
    )
    p.set_defaults(run=cmd_pin)
    options.add_image_selection(p)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale line")
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse (exit 5) images not signed with KEY or attesting other files (default: the manifest's "
        "[signing] verify-key)",
    )
    options.add_no_tlog(p)
    p.add_argument(
        "dockerfiles", nargs="+", type=Path, metavar="DOCKERFILE", help="the Dockerfiles to rewrite"
    )


def _publish_command(args: argparse.Namespace) -> str:
    """The `bake publish` command that makes what pin works on."""
    if args.runtime:
        return shlex.join(["bake", "publish", "--runtime", "--repository", args.repository])
    command = ["bake", "publish", "--manifest", args.manifest, "--repository", args.repository]
    return shlex.join(command + [word for group in args.group for word in ("--group", group)])


def cmd_pin(args: argparse.Namespace) -> int:
    from bake import pin, publish, signing

    options.check_image_selection(args)
    manifest = None if args.runtime else args.manifest
    with options.naming_the_variable(manifest):  # its [signing] table names the default key
        verifier = signing.pin_verifier(args.repository, manifest, args.verify_key, no_tlog=args.no_tlog)
    # --check proves the digests already on the lines too, before it compares them.
    lines = pin.pinned_lines(args.dockerfiles, args.repository) if verifier and args.check else []
    if args.runtime:
        runtime = publish.lookup(publish.runtime_ref(args.repository), _publish_command(args))
        if verifier:
            signing.verify_published(runtime, verifier, lines)
        pinned, block = runtime.pinned, None
    else:
        with options.naming_the_variable(args.manifest):
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

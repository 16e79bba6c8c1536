"""``bake verify``: check the files under --dest against a manifest or the lock fetch wrote (``--json``
reports each file); or, with ``--image``, prove a built image's assets published signed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bake import index, manifest, verify
from bake.commands import options
from bake.errors import UsageError, VerifyError

NAME = "verify"
EXIT_CODES = (0, 2, 3)
ENVIRONMENT = ("BAKE_MANIFEST",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``verify`` to the CLI's sub-parsers."""
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
    options.add_group(p, "with --manifest: check group G plus shared assets; repeatable; default every asset")
    p.add_argument(
        "--allow-http", action="store_true", help="with --manifest: allow its plain http:// non-loopback URLs"
    )
    p.add_argument(
        "--dest",
        type=Path,
        metavar="D",
        help="the directory fetch filled (no default: it or --image is needed)",
    )
    options.add_json(p)
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
    options.add_no_tlog(p)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.image is not None or args.dest is None or args.key is not None or args.repository is not None:
        return _verify_image(args)
    # Inside an image there is no manifest; the lock written at fetch time says what must be there.
    # No default manifest applies here (the contract), but BAKE_MANIFEST names one.
    args.manifest = args.manifest or (
        options.FromEnv(os.environ["BAKE_MANIFEST"]) if os.environ.get("BAKE_MANIFEST") else None
    )
    body = options.report_body(args, dest=str(args.dest), against=str(args.dest / index.LOCK_NAME))
    if args.manifest is None:
        if args.group:
            raise UsageError("--group needs --manifest; the lock already holds only the selected assets")
        files = index.read_lock(args.dest)
        assets = None
    else:
        assets = options.selected(args)
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
    print(f"bake: {len(files)} asset(s) under {args.dest} verified", file=options.out(args))
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

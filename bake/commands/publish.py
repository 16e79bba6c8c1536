"""``bake publish``: build and push the asset images of a manifest (or bake's runtime image) unless the
registry has them, optionally signed; print what was published, pinned by digest."""

from __future__ import annotations

import argparse
from pathlib import Path

from bake.commands import options

NAME = "publish"
EXIT_CODES = (0, 2, 5)
ENVIRONMENT = ("BAKE_MANIFEST", "BAKE_MIRRORS", "BAKE_FETCH_ARGS", "HF_TOKEN", "HF_ENDPOINT", "SSL_CERT_FILE")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``publish`` to the CLI's sub-parsers."""
    p = sub.add_parser(
        "publish",
        help="build and push REPO:<manifest digest> (or --runtime) unless the registry has it; "
        "print REPO:TAG@sha256:DIGEST",
    )
    p.set_defaults(run=cmd_publish)
    options.add_image_selection(p)
    p.add_argument(
        "--sign",
        metavar="KEY",
        help="sign each image and attest each unit's files with cosign: a private key file or a KMS URI "
        "(default: no signing)",
    )
    options.add_no_tlog(p)
    p.add_argument("buildx_args", nargs=argparse.REMAINDER, help="passed to docker buildx build (after --)")


def cmd_publish(args: argparse.Namespace) -> int:
    from bake import publish, signing

    # publish_* check the repository and read the manifest before they ask the registry.
    options.check_image_selection(args)
    buildx_args = options.passed_on(args.buildx_args)
    signer = signing.signer(args.sign, tlog=not args.no_tlog) if args.sign else None  # before any build
    if args.runtime:
        runtime = publish.publish_runtime(args.repository, buildx_args)
        if signer:
            signing.sign_published(runtime, signer)
        print(runtime.pinned)
    else:
        # the repository is checked before the manifest is read
        with options.naming_the_variable(args.manifest):
            block = publish.publish_assets(Path(args.manifest), args.repository, args.group, buildx_args)
            if signer:
                signing.sign_block(block, args.manifest, args.group, signer)
        print("\n".join(block.lines()))
    return 0

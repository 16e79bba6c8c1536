"""``bake add``: fetch a new file once and append its complete entry to the manifest, fill in an entry's
missing size, or pin a whole Hub repository (``hf://ORG/REPO[@REV]``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bake.commands import options
from bake.errors import UsageError

NAME = "add"
EXIT_CODES = (0, 2, 3)
ENVIRONMENT = options.FETCHING_VARIABLES


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``add`` to the CLI's sub-parsers."""
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
        default=options.default_manifest_path(),
        help=f"manifest to edit; default {options.MANIFEST_DEFAULT_RULE} (started if missing)",
    )
    options.add_group(add, "put the entry in group G; repeatable; default no group (a shared asset)")
    add.add_argument("--allow-http", action="store_true", help="allow plain http:// to non-loopback hosts")
    options.add_fetch_options(add)
    _add_hub_options(add)


def _add_hub_options(add: argparse.ArgumentParser) -> None:
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


def _refuse(args: argparse.Namespace, names: tuple[str, ...], why: str) -> None:
    """Raise UsageError for the first of the options ``names`` given: this kind of target does not take it."""
    for option in names:
        if getattr(args, option, None):
            raise UsageError(f"--{option.replace('_', '-')} is for {why}")


def _add_repository(args: argparse.Namespace, engine) -> int:
    """``bake add hf://ORG/REPO[@REV]``: pin a whole Hub repository, print what was pinned; exit 0, 2 or 3."""
    from bake.add import hub_repo as hub_add

    _refuse(args, ("name", "path", "sha256", "size_only"), f"one file; {args.target} pins a whole repository")
    pinned = hub_add.pin_repository(
        Path(args.manifest),
        args.target,
        engine,
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

    engine = options.fetch_options(args)
    if args.target.startswith("hf://"):
        from bake.add import hub_repo as hub_add

        if hub_add.is_repo_url(args.target):  # hf://ORG/REPO[@REV]: a whole Hub repository, [[hub]]
            return _add_repository(args, engine)
    _refuse(
        args,
        ("include", "exclude", "repo_type", "downloader"),
        f"hf://ORG/REPO[@REV]; {args.target} is one file",
    )
    path = Path(args.manifest)
    if args.size_only:
        if args.name or args.path or args.sha256 or args.group:
            raise UsageError("--size-only takes only an asset NAME and fetch options")
        asset = add.fill_size(path, args.target, engine, options.progress_sink(args))
        print(f"bake: {asset.name}: size = {asset.size} in {path}")
        return 0
    with options.naming_the_variable(args.manifest, starts=True):
        asset = add.add(
            path,
            args.target,
            engine,
            name=args.name,
            path=args.path,
            groups=args.group,
            sha256=args.sha256,
            progress=options.progress_sink(args),
        )
    print(f"bake: added {asset.name} ({asset.path}, {asset.size} bytes, sha256 {asset.sha256}) to {path}")
    return 0

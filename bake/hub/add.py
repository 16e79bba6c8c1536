"""``bake add hf://ORG/REPO[@REV]``: pin a Hub repository at a commit and record every selected file.

The revision (a branch, a tag, or nothing for ``main``) is resolved to its commit
through ``HfApi().repo_info(..., files_metadata=True)``, which lists each file with
its size, git blob id and, for LFS files, the sha256 the Hub publishes. The other
files are downloaded once, at the pinned commit, checked against their git blob id
(the SHA-1 of git's blob header plus the bytes) and hashed. The entry is appended
with tomlkit, so the rest of the manifest keeps every byte.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote

from bake import atomic, hubtable
from bake.errors import FetchError, ManifestError, UsageError

_URL = re.compile(r"^hf://(?:(datasets)/)?([^/@]+/[^/@]+)(?:@([^/]+))?/?$")


def is_repo_url(url: str) -> bool:
    """True for ``hf://[datasets/]ORG/REPO[@REV]`` (a repository, not one file)."""
    return bool(_URL.match(url))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``bake add`` takes for a Hub repository."""
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="P",
        help="only files matching P (fnmatch); repeatable",
    )
    parser.add_argument("--exclude", action="append", default=[], metavar="P", help="skip files matching P")
    parser.add_argument("--repo-type", choices=hubtable.KINDS, help="model (default) or dataset")
    parser.add_argument(
        "--downloader",
        choices=hubtable.DOWNLOADERS,
        help=f"how fetch gets the bytes (default {hubtable.DEFAULT_DOWNLOADER}; recorded only if different)",
    )


def refuse_repo_options(args: argparse.Namespace) -> None:
    """Raise UsageError when a one-file ``bake add`` got an option that only a repository takes."""
    for option in ("include", "exclude", "repo_type", "downloader"):
        if getattr(args, option, None):
            raise UsageError(
                f"--{option.replace('_', '-')} is for hf://ORG/REPO[@REV]; {args.target} is one file"
            )


def parse_url(url: str, repo_type: str | None) -> tuple[str, str, str | None]:
    """Return (repo, kind, revision or None). Raises UsageError for anything else."""
    match = _URL.match(url)
    if not match:
        raise UsageError(f"{url}: expected hf://ORG/REPO[@REVISION] or hf://datasets/ORG/REPO[@REVISION]")
    kind = "dataset" if match.group(1) else repo_type or "model"
    if match.group(1) and repo_type not in (None, "dataset"):
        raise UsageError(f"{url}: a datasets/ URL with --repo-type {repo_type}; drop one of them")
    return match.group(2), kind, unquote(match.group(3)) if match.group(3) else None


def resolve(repo: str, kind: str, revision: str | None, token: str | None) -> tuple[str, list]:
    """Ask the Hub for the commit ``revision`` names and the files there; return (commit, siblings)."""
    from bake.hub import download  # the fetch engine loads only when a repository is added

    try:
        from huggingface_hub import HfApi
    except ImportError:
        raise UsageError("bake add hf://… needs huggingface_hub; pip install huggingface_hub") from None
    label = f"hf://{'datasets/' if kind == 'dataset' else ''}{repo}@{revision or 'main'}"
    try:
        info = HfApi(endpoint=download.endpoint(), token=token).repo_info(
            repo, repo_type=kind, revision=revision, files_metadata=True
        )
    except Exception as exc:  # huggingface_hub raises many types; each becomes one exit-3 line
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise download.hub_error(label, exc) from None
    if not info.sha or not info.siblings:
        raise FetchError(f"{label}: the Hub answered without a commit or without files; nothing to pin")
    return info.sha, list(info.siblings)


def _select(siblings: list, include: list[str], exclude: list[str], label: str) -> list:
    from huggingface_hub.utils import filter_repo_objects

    chosen = list(
        filter_repo_objects(
            siblings,
            allow_patterns=include or None,
            ignore_patterns=exclude or None,
            key=lambda s: s.rfilename,
        )
    )
    if not chosen:
        raise UsageError(f"{label}: no file matches --include {include} / --exclude {exclude}")
    return sorted(chosen, key=lambda s: s.rfilename)


def _record_small(sibling, repo: str, kind: str, commit: str, tmp: Path, token: str | None) -> dict:
    """Download a non-LFS file once, check its git blob id, and return its record with the sha256."""
    from bake.hub import download

    local = download.download_file(repo, kind, commit, sibling.rfilename, tmp, token)
    data_sha1 = hashlib.sha1(b"blob %d\x00" % local.stat().st_size)
    data_sha256 = hashlib.sha256()
    with open(local, "rb") as fh:
        while block := fh.read(1 << 20):
            data_sha1.update(block)
            data_sha256.update(block)
    if data_sha1.hexdigest() != sibling.blob_id or local.stat().st_size != sibling.size:
        raise FetchError(
            f"hf://{repo}@{commit}/{sibling.rfilename}: the bytes served are not git blob {sibling.blob_id} "
            f"({sibling.size} bytes) that the Hub lists; got {local.stat().st_size} bytes, blob "
            f"{data_sha1.hexdigest()}; check HF_ENDPOINT or the mirror"
        )
    return {
        "path": sibling.rfilename,
        "size": sibling.size,
        "sha256": data_sha256.hexdigest(),
        "blob": sibling.blob_id,
    }


def file_records(repo: str, kind: str, commit: str, siblings: list, token: str | None) -> list[dict]:
    """Return the manifest records for ``siblings``: LFS facts from the Hub, the others hashed here."""
    records = []
    tmp = Path(tempfile.mkdtemp(prefix="bake-add-"))
    try:
        for s in siblings:
            if s.size is None or s.blob_id is None:
                raise FetchError(f"hf://{repo}@{commit}/{s.rfilename}: the Hub listed no size or blob id")
            if s.lfs is not None:
                records.append(
                    {
                        "path": s.rfilename,
                        "size": s.lfs.size,
                        "sha256": s.lfs.sha256,
                        "blob": s.blob_id,
                        "lfs": True,
                    }
                )
            else:
                records.append(_record_small(s, repo, kind, commit, tmp, token))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return records


def entry_table(entry: dict):
    """A tomlkit table for one ``[[hub]]`` entry, one file record per line."""
    import tomlkit

    table = tomlkit.table()
    for key in ("repo", "type", "commit", "ref", "include", "exclude", "groups", "downloader"):
        if entry.get(key) not in (None, [], ""):
            table[key] = entry[key]
    files = tomlkit.array()
    for record in entry["files"]:
        inline = tomlkit.inline_table()
        inline.update(record)
        files.append(inline)
    table["files"] = files.multiline(True)
    return table


def append_entry(manifest_path: Path, entry: dict) -> None:
    """Append ``entry`` to the manifest, checked as a whole before an atomic replace.

    Raises ManifestError (nothing written) when the result would not be a valid manifest,
    for example when that repository is already pinned at that commit.
    """
    import tomlkit

    from bake.manifest import parse_manifest, read_manifest_text

    text = read_manifest_text(manifest_path) if manifest_path.exists() else ""
    doc = tomlkit.parse(text)
    if "hub" not in doc:
        doc.append("hub", tomlkit.aot())
    doc["hub"].append(entry_table(entry))
    new = tomlkit.dumps(doc)
    parse_manifest(new, source=str(manifest_path), allow_http=True)
    mode = manifest_path.stat().st_mode & 0o7777 if manifest_path.exists() else 0o644
    atomic.write_file(manifest_path, new.encode("utf-8"), mode=mode)


def cmd_add(args: argparse.Namespace) -> int:
    """Run ``bake add`` for a Hub repository; print what was pinned. Exit codes: 0, 2, 3."""
    url = args.target
    if not is_repo_url(url):
        raise UsageError(f"{url}: `bake add` here takes hf://[datasets/]ORG/REPO[@REVISION]")
    for option in ("name", "path", "sha256", "size_only"):
        if getattr(args, option, None):
            raise UsageError(f"--{option.replace('_', '-')} is for one file; {url} pins a whole repository")
    repo, kind, revision = parse_url(url, args.repo_type)
    manifest_path = Path(args.manifest)
    if manifest_path.exists() and not manifest_path.is_file():
        raise UsageError(f"--manifest {manifest_path}: not a file")
    from bake.fetch.sources import hf_token

    token = hf_token()
    commit, siblings = resolve(repo, kind, revision, token)
    chosen = _select(siblings, args.include, args.exclude, url)
    entry = {
        "repo": repo,
        "type": kind if kind != "model" else None,
        "commit": commit,
        "ref": None if revision == commit else revision or "main",
        "include": args.include,
        "exclude": args.exclude,
        "groups": args.group,
        "downloader": args.downloader if args.downloader not in (None, hubtable.DEFAULT_DOWNLOADER) else None,
        "files": file_records(repo, kind, commit, chosen, token),
    }
    try:
        append_entry(manifest_path, entry)
    except ManifestError as exc:
        raise ManifestError(f"{url}: not added, the manifest is unchanged: {exc}") from None
    total = sum(f["size"] for f in entry["files"])
    count = len(entry["files"])
    print(
        f"bake: pinned {url} at {commit}: {count} file(s), {total} bytes, in {manifest_path}",
        file=sys.stderr,
    )
    return 0

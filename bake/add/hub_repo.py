"""``bake add hf://ORG/REPO[@REV]``: pin a Hub repository at a commit and record every selected file.

The revision (a branch, a tag, or nothing for ``main``) is resolved to its commit, and
the files there are listed page by page (bake.add.hub_api), every answer checked before
it is used. LFS files are recorded with the sha256 the Hub lists, and never downloaded.
The others are read once, at the pinned commit, through bake's HTTP client, streamed
through sha256 and git's blob hash and checked against their blob id; no byte of them
is written anywhere. The entry is rendered as text, one file record a line, and
appended to the manifest as it is under the edit lock (bake.manifestedit): the rest of
the manifest keeps every byte, and two adds at once keep both entries.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from bake import manifest, manifestedit
from bake.add.hub_api import HubReader, Listed
from bake.errors import FetchError, ManifestError, UsageError
from bake.fetch.options import FetchOptions
from bake.hub.entry import DEFAULT_DOWNLOADER

_URL = re.compile(r"hf://(?:(datasets)/)?([^/@]+/[^/@]+)(?:@([^/]+))?/?")


def is_repo_url(url: str) -> bool:
    """True for ``hf://[datasets/]ORG/REPO[@REV]`` (a repository, not one file)."""
    return bool(_URL.fullmatch(url))


def parse_url(url: str, repo_type: str | None) -> tuple[str, str, str | None]:
    """Return (repo, kind, revision or None). Raises UsageError for anything else."""
    match = _URL.fullmatch(url)
    if not match:
        raise UsageError(f"{url}: expected hf://ORG/REPO[@REVISION] or hf://datasets/ORG/REPO[@REVISION]")
    kind = "dataset" if match.group(1) else repo_type or "model"
    if match.group(1) and repo_type not in (None, "dataset"):
        raise UsageError(f"{url}: a datasets/ URL with --repo-type {repo_type}; drop one of them")
    return match.group(2), kind, unquote(match.group(3)) if match.group(3) else None


def _select(files: list[Listed], include: list[str], exclude: list[str], label: str) -> list[Listed]:
    try:
        from huggingface_hub.utils import filter_repo_objects  # the Hub's own pattern rules
    except ImportError:
        raise UsageError("bake add hf://… needs huggingface_hub; pip install huggingface_hub") from None
    chosen = list(
        filter_repo_objects(
            files, allow_patterns=include or None, ignore_patterns=exclude or None, key=lambda f: f.path
        )
    )
    if not chosen:
        raise UsageError(f"{label}: no file matches --include {include} / --exclude {exclude}")
    return chosen


def _hashed(reader: HubReader, commit: str, listed: Listed) -> dict:
    """Read a non-LFS file once, check its git blob id, and return its record with the sha256."""
    where = f"@{commit}/{listed.path}"
    sha1 = hashlib.sha1(b"blob %d\x00" % listed.size)
    sha256 = hashlib.sha256()
    got = 0
    for chunk in reader.stream(listed.path, commit):
        got += len(chunk)
        if got > listed.size:
            raise reader.refused(
                "a body", f"over {listed.size} bytes", f"the {listed.size} bytes it lists", where
            )
        sha1.update(chunk)
        sha256.update(chunk)
    if got != listed.size or sha1.hexdigest() != listed.blob:
        raise FetchError(
            f"{reader.label}{where}: the bytes served are not git blob {listed.blob} ({listed.size} bytes) "
            f"that the Hub lists; got {got} bytes, blob {sha1.hexdigest()}; check HF_ENDPOINT or the mirror"
        )
    return {"path": listed.path, "size": listed.size, "sha256": sha256.hexdigest(), "blob": listed.blob}


def file_records(reader: HubReader, commit: str, chosen: list[Listed], workers: int) -> list[dict]:
    """The manifest records for ``chosen``: LFS facts from the listing, the other files hashed here."""
    small = [f for f in chosen if f.lfs_sha256 is None]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        hashed = pool.map(
            lambda f: reader.with_retries(
                f"{reader.label}@{commit}/{f.path}", lambda: _hashed(reader, commit, f)
            ),
            small,
        )
        by_path = {r["path"]: r for r in hashed}
    return [
        by_path[f.path]
        if f.lfs_sha256 is None
        else {"path": f.path, "size": f.size, "sha256": f.lfs_sha256, "blob": f.blob, "lfs": True}
        for f in chosen
    ]


def _toml(value: object) -> str:
    """A TOML value: JSON's strings (UTF-8 as it is), integers, booleans and arrays read the same."""
    return json.dumps(value, ensure_ascii=False)


def entry_text(entry: dict) -> str:
    """One ``[[hub]]`` table as text, one file record a line (a renderer would take seconds at 100,000)."""
    lines = ["[[hub]]"]
    for key in ("repo", "type", "commit", "ref", "include", "exclude", "groups", "downloader"):
        if entry.get(key) not in (None, [], ""):
            lines.append(f"{key} = {_toml(entry[key])}")
    lines.append("files = [")
    for record in entry["files"]:
        fields = ", ".join(f"{k} = {_toml(v)}" for k, v in record.items())
        lines.append(f"  {{{fields}}},")
    lines.append("]")
    return "\n".join(lines) + "\n"


def append_entry(manifest_path: Path, entry: dict) -> None:
    """Append ``entry`` to the manifest as it is under the edit lock; the whole is checked before the rename.

    Raises ManifestError (nothing written) when the result would not be a valid manifest,
    for example when that repository is already pinned at that commit.
    """
    with manifestedit.locked(manifest_path) as target:
        text = manifest.read_manifest_text(target) if target.exists() else ""
        new = manifestedit.appended(text, entry_text(entry))
        manifest.parse_manifest(new, source=str(manifest_path), allow_http=True)
        manifestedit.replace(target, new)


@dataclass(frozen=True)
class Pinned:
    """What ``pin_repository`` appended: the repository's commit, and its files' count and bytes."""

    url: str
    commit: str
    files: int
    total: int
    manifest: Path


def pin_repository(
    manifest_path: Path,
    url: str,
    options: FetchOptions,
    *,
    repo_type: str | None = None,
    include: list[str] | tuple[str, ...] = (),
    exclude: list[str] | tuple[str, ...] = (),
    groups: list[str] | tuple[str, ...] = (),
    downloader: str | None = None,
) -> Pinned:
    """Pin the repository ``url`` names at a commit and append its ``[[hub]]`` entry; return what was pinned.

    Raises UsageError, FetchError or ManifestError (the manifest unchanged).
    """
    include, exclude = list(include), list(exclude)
    repo, kind, revision = parse_url(url, repo_type)
    if manifest_path.exists() and not manifest_path.is_file():
        raise UsageError(f"--manifest {manifest_path}: not a file")
    reader = HubReader(repo, kind, options)
    commit = reader.commit(revision)
    listed = reader.files(commit)
    if not listed:
        raise FetchError(f"{reader.label}@{commit}: the Hub lists no file there; nothing to pin")
    chosen = _select(listed, include, exclude, url)
    entry = {
        "repo": repo,
        "type": kind if kind != "model" else None,
        "commit": commit,
        "ref": None if revision == commit else revision or "main",
        "include": include,
        "exclude": exclude,
        "groups": list(groups),
        "downloader": downloader if downloader not in (None, DEFAULT_DOWNLOADER) else None,
        "files": file_records(reader, commit, chosen, options.connections),
    }
    try:
        append_entry(manifest_path, entry)
    except ManifestError as exc:
        raise ManifestError(f"{url}: not added, the manifest is unchanged: {exc}") from None
    return Pinned(url, commit, len(entry["files"]), sum(f["size"] for f in entry["files"]), manifest_path)

"""The ``[[hub]]`` manifest table: a Hub repository pinned at a commit, every file recorded and checked.

One entry names a repository, the full commit SHA it is pinned at, and the file
records ``bake add hf://…`` wrote: path, size, sha256, the git blob id and whether
the file is stored with LFS. The Hub's cache names a file's contents by its ETag,
which is the sha256 for LFS files and the git blob id for the others, so each
distinct ETag becomes one asset at ``hub/<repo folder>/blobs/<etag>``; fetch, verify,
the lock and ``SHA256SUMS`` then treat it like any other asset. This module knows
nothing of ``Asset``: it returns the fields, and ``manifest`` makes the assets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from bake.errors import ManifestError
from bake.hashes import GIT_SHA1_HEX, SHA256_HEX, bare_sha256
from bake.hub.entry import DEFAULT_DOWNLOADER, DOWNLOADERS, KINDS, HubBlob, HubEntry, HubFile, blob_path
from bake.paths import parents
from bake.tomlkeys import expect_mapping, refuse_unknown_keys

_ENTRY_KEYS = {"repo", "type", "commit", "ref", "include", "exclude", "groups", "downloader", "files"}
_FILE_KEYS = {"path", "size", "sha256", "blob", "lfs"}
# huggingface_hub's own repo id rule (validate_repo_id), with the namespace required.
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Characters that no name may carry: they would break bake.serve's TAB-separated lines, a
# URL, or a shell word. The Hub allows them in file names; such files are refused, by name.
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\?#%]")


def _where(raw: dict, index: int) -> str:
    repo = raw.get("repo")
    commit = raw.get("commit")
    if isinstance(repo, str) and isinstance(commit, str):
        return f"hub {repo}@{commit}"
    return f"hub #{index + 1}" + (f" ({repo})" if isinstance(repo, str) else "")


def _strings(raw: dict, key: str, where: str, pattern: re.Pattern | None = None) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ManifestError(f"{where}: {key} must be a list of non-empty strings, got {value!r}")
    for v in value:
        # "?" is a glob character in include/exclude patterns; every other refused character stays refused.
        if (pattern is not None and not pattern.fullmatch(v)) or _BAD_CHARS.search(v.replace("?", "")):
            raise ManifestError(f"{where}: {key} entry {v!r} has a character that is not allowed")
    return tuple(value)


def check_relpath(path: object, where: str, what: str = "path") -> str:
    """Return ``path`` if it is a normalised relative POSIX path safe for the layout, else raise."""
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{where}: {what} must be a non-empty string, got {path!r}")
    pure = PurePosixPath(path)
    if (
        _BAD_CHARS.search(path)
        or pure.is_absolute()
        or ".." in pure.parts
        or path != pure.as_posix()
        or path.endswith("/")
        or path.startswith("./")
    ):
        raise ManifestError(
            f"{where}: {what} {path!r} must be a normalised relative path with no '..', no control "
            "characters and none of \\ ? # %"
        )
    return path


def _parse_file(raw: object, where: str) -> HubFile:
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: each files entry must be a table {{path = …, …}}, got {raw!r}")
    path = check_relpath(raw.get("path"), where, "file path")
    here = f"{where} file {path!r}"
    refuse_unknown_keys(raw, _FILE_KEYS, here)
    size, sha, blob, lfs = (
        raw.get("size"),
        bare_sha256(raw.get("sha256")),
        raw.get("blob"),
        raw.get("lfs", False),
    )
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ManifestError(f"{here}: size must be a non-negative integer, got {size!r}")
    if not isinstance(sha, str) or not SHA256_HEX.fullmatch(sha):
        raise ManifestError(
            f"{here}: sha256 must be 64 hex characters (or sha256: and them), got {raw.get('sha256')!r}"
        )
    if not isinstance(blob, str) or not GIT_SHA1_HEX.fullmatch(blob):
        raise ManifestError(
            f"{here}: blob must be the git blob id, 40 lower-case hex characters, got {blob!r}"
        )
    if not isinstance(lfs, bool):
        raise ManifestError(f"{here}: lfs must be true or false, got {lfs!r}")
    return HubFile(path=path, size=size, sha256=sha, blob=blob, lfs=lfs)


def _parse_head(raw: dict, where: str) -> tuple[str, str, str, str | None, str]:
    repo, kind, commit = raw.get("repo"), raw.get("type", "model"), raw.get("commit")
    ref, downloader = raw.get("ref"), raw.get("downloader", DEFAULT_DOWNLOADER)
    if not isinstance(repo, str) or not _REPO.fullmatch(repo) or "--" in repo or ".." in repo:
        raise ManifestError(f"{where}: repo must be ORG/NAME as on the Hub, got {repo!r}")
    if kind not in KINDS:
        raise ManifestError(f"{where}: type must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(commit, str) or not GIT_SHA1_HEX.fullmatch(commit):
        raise ManifestError(
            f"{where}: commit must be the full 40-hex commit SHA, got {commit!r}; "
            "`bake add hf://ORG/REPO@BRANCH` resolves a branch or tag to it"
        )
    if ref is not None:
        check_relpath(ref, where, "ref")
        if GIT_SHA1_HEX.fullmatch(ref):
            raise ManifestError(f"{where}: ref {ref!r} is a commit SHA; a ref names a branch or tag")
    if downloader not in DOWNLOADERS:
        raise ManifestError(
            f"{where}: downloader must be one of {', '.join(DOWNLOADERS)}, got {downloader!r}"
        )
    return repo, kind, commit, ref, downloader


def parse_entry(raw: object, index: int) -> HubEntry:
    """Validate one ``[[hub]]`` table and return it. Raises ManifestError naming the repository."""
    raw = expect_mapping(raw, f"hub #{index + 1} (written [[hub]])")
    where = _where(raw, index)
    refuse_unknown_keys(raw, _ENTRY_KEYS, where)
    repo, kind, commit, ref, downloader = _parse_head(raw, where)
    raw_files = raw.get("files")
    if not isinstance(raw_files, list) or not raw_files:
        raise ManifestError(f"{where}: files must be a non-empty list; `bake add hf://{repo}` writes it")
    files = tuple(_parse_file(f, where) for f in raw_files)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise ManifestError(f"{where}: file {f.path!r} is listed twice")
        seen.add(f.path)
    _check_file_prefixes(files, where)
    return HubEntry(
        repo=repo,
        kind=kind,
        commit=commit,
        files=tuple(sorted(files, key=lambda f: f.path)),
        ref=ref,
        include=_strings(raw, "include", where),
        exclude=_strings(raw, "exclude", where),
        groups=_strings(raw, "groups", where, _GROUP),
        downloader=downloader,
    )


def _check_file_prefixes(files: tuple[HubFile, ...], where: str) -> None:
    paths = {f.path for f in files}
    for f in files:
        for parent in parents(f.path):
            if parent in paths:
                raise ManifestError(f"{where}: file {f.path!r} lies under {parent!r}, which is a file")


def parse_entries(raw: object, source: str) -> list[HubEntry]:
    """Validate the ``hub`` array of a manifest; ``None`` (no ``[[hub]]``) gives an empty list."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ManifestError(f"{source}: 'hub' must be an array of tables written [[hub]], not [hub]")
    entries = [parse_entry(item, i) for i, item in enumerate(raw)]
    seen: set[tuple[str, str, str]] = set()
    for e in entries:
        key = (e.kind, e.repo, e.commit)
        if key in seen:
            raise ManifestError(f"hub {e.label}: pinned twice; merge the two entries' files into one")
        seen.add(key)
    refs: dict[tuple[str, str], str] = {}
    for e in entries:
        if e.ref is not None and refs.setdefault((e.folder, e.ref), e.commit) != e.commit:
            raise ManifestError(f"hub {e.label}: ref {e.ref!r} also names commit {refs[(e.folder, e.ref)]}")
    return entries


def blob_fields(entries: list[HubEntry]) -> list[dict]:
    """Return the asset fields for every distinct blob of ``entries``, in manifest order.

    Each dict has ``name``, ``path``, ``sha256``, ``size``, ``urls``, ``groups`` and ``hub``
    (a HubBlob). A blob backing several files is fetched once; its URLs are those files'.
    Raises ManifestError when two records of one blob disagree on its size or sha256.
    """
    blobs: dict[str, list[tuple[HubEntry, HubFile]]] = {}
    for entry in entries:
        for f in entry.files:
            blobs.setdefault(blob_path(entry.folder, f.etag), []).append((entry, f))
    fields = []
    for path, uses in blobs.items():
        first_entry, first = uses[0]
        for entry, f in uses[1:]:
            if (f.size, f.sha256) != (first.size, first.sha256):
                raise ManifestError(
                    f"hub {entry.label} file {f.path!r}: blob {f.etag} is also {first_entry.label} "
                    f"{first.path!r} with size {first.size} and sha256 {first.sha256}; the records disagree"
                )
        groups = tuple(dict.fromkeys(g for entry, _ in uses for g in entry.groups))
        # A blob shared with an entry that names no group is shared too.
        if any(not entry.groups for entry, _ in uses):
            groups = ()
        fields.append(
            {
                "name": f"{first_entry.short_label}/{first.path}",
                "path": path,
                "sha256": first.sha256,
                "size": first.size,
                "urls": tuple(dict.fromkeys(entry.url(f.path) for entry, f in uses)),
                "groups": groups,
                "hub": HubBlob(
                    folder=first_entry.folder, etag=first.etag, uses=tuple((e, f.path) for e, f in uses)
                ),
            }
        )
    return fields


def selected_entries(assets: list) -> list[HubEntry]:
    """Return the entries whose every blob is among ``assets`` (a selection), in a stable order.

    An entry that a group selection cut in part is left out whole: its snapshot would
    otherwise hold links to blobs that are not there.
    """
    present = {a.path for a in assets if getattr(a, "hub", None) is not None}
    candidates = {e for a in assets if getattr(a, "hub", None) is not None for e in a.hub.entries}
    chosen = [e for e in candidates if all(blob_path(e.folder, f.etag) in present for f in e.files)]
    return sorted(chosen, key=lambda e: (e.folder, e.commit))


def digest_records(entries: Iterable[HubEntry]) -> list[dict]:
    """The Hub part of the manifest digest: what the layout holds beyond the blobs' bytes.

    ``entries`` are those a selection holds whole (``selected_entries``). Empty when there is none,
    so the digest of a manifest without one is unchanged.
    """
    return [
        {
            "folder": e.folder,
            "commit": e.commit,
            "ref": e.ref,
            "trees": e.whole_repo,
            "files": [[f.path, f.size, f.sha256, f.blob, f.lfs] for f in e.files],
        }
        for e in entries
    ]

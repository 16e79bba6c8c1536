"""What a job's caches hold, read offline: the assets and Hub commits that can be pinned, and what cannot.

Each DIR is a cache a job filled: an ``HF_HOME`` or a Hub cache, an ``XDG_CACHE_HOME``, a
``TIKTOKEN_*`` directory, a ``TMPDIR`` holding tiktoken's defaults, or a location of the
consumer table. Nothing is guessed and no server is asked:

- a Hub file is pinned at the commit its snapshot names, its sha256 proven from the blob's
  bytes against the blob's name (``bake.hub.scan``);
- a s3tokenizer checkpoint by s3tokenizer's own table (read without importing it): the URL it
  downloads ``<model>.onnx`` from, and the sha256 the bytes must have;
- a tiktoken vocab by its cache name, the SHA-1 of its URL: a URL the installed tiktoken's table
  or the manifest knows, the bytes checked against tiktoken's expected sha256 where it has one.

Everything else is a ``NotPinned`` with its reason: a declared consumer's file (it has no URL:
the ``bake add`` line to run is given), a partial download, bytes that do not match their name,
a bad ref. Nothing outside the DIRs is read: links are judged by their text and never followed,
except the entrypoint's links into the baked assets, which are bake's own and skipped.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from bake import consumers, hubtable
from bake.errors import FetchError, ManifestError
from bake.hashes import GIT_SHA1_HEX
from bake.hub.scan import CachedCommit, NotPinned, read_regular, scan_cache, what_is
from bake.manifest import Asset

DEFAULT_SERVED_ROOT = "/opt/bake/assets"
# Where each built-in consumer's files sit below a DIR given as the variable its location names.
HUB_UNDER = ("", "hub", "huggingface/hub")  # HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME
TIKTOKEN_UNDER = ("tiktoken-rs-cache", "data-gym-cache")  # the clients' defaults under TMPDIR


@dataclass
class Found:
    """What the caches hold: pinnable assets and Hub commits, and what cannot be pinned."""

    assets: list[Asset] = field(default_factory=list)
    commits: list[CachedCommit] = field(default_factory=list)
    problems: list[NotPinned] = field(default_factory=list)


def served_root() -> str:
    """The baked asset root whose links the entrypoint puts into a job's caches."""
    return os.environ.get("BAKE_ASSETS") or DEFAULT_SERVED_ROOT


def _real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_hub_cache(path: str) -> bool:
    try:
        return any(e.name.startswith(tuple(f"{p}s--" for p in hubtable.KINDS)) for e in os.scandir(path))
    except OSError:
        return False


def _holds_sha1_names(path: str) -> bool:
    try:
        return any(GIT_SHA1_HEX.match(e.name.split(".")[0]) for e in os.scandir(path))
    except OSError:
        return False


def places(dirs: Sequence[str], declared: Sequence[consumers.Consumer]) -> list[tuple[str, str]]:
    """Return (kind, directory) for each cache under ``dirs``: ``hub``, ``s3tokenizer``, ``tiktoken``,
    or a declared consumer's name. Each is a real directory (never reached through a link)."""
    found: dict[str, str] = {}
    for top in dirs:
        base = os.path.basename(os.path.normpath(top))
        for sub in HUB_UNDER:
            path = os.path.join(top, sub) if sub else top
            if (not sub or _real_dir(path)) and _is_hub_cache(path):
                found.setdefault(os.path.normpath(path), "hub")
        for path in (top if base == "s3tokenizer" else "", os.path.join(top, "s3tokenizer")):
            if path and _real_dir(path):
                found.setdefault(os.path.normpath(path), "s3tokenizer")
        for sub in TIKTOKEN_UNDER:
            if _real_dir(os.path.join(top, sub)):
                found.setdefault(os.path.normpath(os.path.join(top, sub)), "tiktoken")
        if base in TIKTOKEN_UNDER or _holds_sha1_names(top):
            found.setdefault(os.path.normpath(top), "tiktoken")
        for consumer in declared:
            for loc in consumer.locations:
                if loc.sub and base == os.path.basename(loc.sub):
                    found.setdefault(os.path.normpath(top), consumer.name)
                elif loc.sub and _real_dir(os.path.join(top, loc.sub)):
                    found.setdefault(os.path.normpath(os.path.join(top, loc.sub)), consumer.name)
    return [(kind, path) for path, kind in found.items()]


def _sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    for block in read_regular(path):
        digest.update(block)
    return digest.hexdigest()


def _files(directory: str, served: str, found: Found) -> list[tuple[str, str, int]]:
    """(name, path, size) of each regular file of a flat consumer directory; the rest are problems.

    Dot-names (bake's own ``.bake`` state) are skipped, and so are links into the baked assets.
    """
    files = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            continue
        if stat.S_ISLNK(mode):
            if not os.readlink(entry.path).startswith(served.rstrip("/") + "/"):
                found.problems.append(
                    NotPinned(entry.path, f"a link to {os.readlink(entry.path)!r}: never followed")
                )
        elif stat.S_ISREG(mode):
            files.append((entry.name, entry.path, entry.stat(follow_symlinks=False).st_size))
        else:
            found.problems.append(NotPinned(entry.path, f"{what_is(mode)}, not a cached file"))
    return files


def _checked(path: str, expected: str | None, found: Found, mismatch: str) -> str | None:
    """The file's sha256, or None (a problem said) when it is unreadable or not ``expected``."""
    try:
        actual = _sha256_of(path)
    except (OSError, ValueError) as exc:
        found.problems.append(NotPinned(path, f"cannot be read ({getattr(exc, 'strerror', None) or exc})"))
        return None
    if expected is not None and actual != expected:
        found.problems.append(NotPinned(path, f"sha256 {actual}, {mismatch} {expected}"))
        return None
    return actual


def scan_s3tokenizer(directory: str, served: str, found: Found) -> None:
    """Pin each ``<model>.onnx`` by s3tokenizer's own table: its URL, and the sha256 it checks."""
    table = consumers.s3tokenizer_table()
    for name, path, size in _files(directory, served, found):
        model = name[: -len(".onnx")] if name.endswith(".onnx") else None
        if table is None:
            found.problems.append(
                NotPinned(
                    path,
                    "its URL is in s3tokenizer's table, and s3tokenizer is not installed here; "
                    "pip install --no-deps s3tokenizer (its table is read, never imported)",
                )
            )
        elif model not in table:
            found.problems.append(
                NotPinned(
                    path,
                    "not a checkpoint s3tokenizer's table names (<model>.onnx); "
                    f"pin it with `bake add URL --path s3tokenizer/{name}`",
                )
            )
        else:
            url, expected = table[model]
            sha = _checked(
                path,
                expected,
                found,
                "not the sha256 s3tokenizer's table expects (a partial or damaged download):",
            )
            if sha is not None:
                found.assets.append(Asset(model, f"s3tokenizer/{name}", sha, (url,), size))


def scan_tiktoken(directory: str, served: str, found: Found, known_urls: Sequence[str]) -> None:
    """Pin each vocab cached as ``<sha1(url)>`` whose URL is known, checked against tiktoken's table."""
    table = consumers.tiktoken_table() or {}
    by_name = {consumers.sha1_name(url): url for url in [*table, *known_urls]}
    for name, path, size in _files(directory, served, found):
        if not GIT_SHA1_HEX.match(name):
            why = (
                "a partial download (tiktoken renames it into place when complete)"
                if GIT_SHA1_HEX.match(name.split(".")[0])
                else "not a vocab cache name (the SHA-1 of its URL)"
            )
            found.problems.append(NotPinned(path, why))
            continue
        url = by_name.get(name)
        if url is None:
            found.problems.append(
                NotPinned(
                    path,
                    "no URL known here hashes to this cache name (tiktoken's table and the manifest's "
                    "tiktoken/ entries were asked); pin it with `bake add URL`",
                )
            )
            continue
        sha = _checked(path, table.get(url), found, "not the sha256 tiktoken expects for its URL:")
        if sha is not None:
            stem = url.rsplit("/", 1)[-1].split(".")[0]
            found.assets.append(Asset(stem, f"tiktoken/{name}", sha, (url,), size))


def scan_declared(directory: str, consumer: str, served: str, found: Found) -> None:
    """A declared consumer's files have no URL: each is named with the ``bake add`` line to run."""
    for base, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and _real_dir(os.path.join(base, d)))
        for _, path, _ in _files(base, served, found) if names else []:
            rel = os.path.relpath(path, directory)
            found.problems.append(
                NotPinned(
                    path,
                    f"a file of consumer {consumer!r}, whose origin no table names; "
                    f"pin it with `bake add URL --path {consumer}/{rel}`",
                )
            )


def check_commit(commit: CachedCommit) -> NotPinned | None:
    """Why a cached commit cannot be a ``[[hub]]`` entry (its repository or a path), or None."""
    raw = {
        "repo": commit.repo,
        "type": commit.kind,
        "commit": commit.commit,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "blob": f.blob} for f in commit.files],
    }
    try:
        hubtable.parse_entry(raw, 0)
    except ManifestError as exc:
        return NotPinned(commit.folder, f"not pinnable: {exc}")
    return None


def scan(dirs: Sequence[str], declared: Sequence[consumers.Consumer], known_urls: Sequence[str]) -> Found:
    """Read every cache under ``dirs``. Raises FetchError (exit 3) when a DIR cannot be read."""
    for top in dirs:
        try:
            os.scandir(top).close()
        except OSError as exc:
            raise FetchError(
                f"{top}: cannot read it as a cache ({exc.strerror or exc}); give a directory a job filled, "
                "such as an HF_HOME, an XDG_CACHE_HOME or a TIKTOKEN_* directory"
            ) from None
    found = Found()
    served = served_root()
    for kind, path in places(dirs, declared):
        try:
            if kind == "hub":
                commits, problems = scan_cache(path, served)
                found.problems += problems
                for commit in commits:
                    bad = check_commit(commit)
                    found.problems += [bad] if bad else []
                    found.commits += [] if bad else [commit]
            elif kind == "s3tokenizer":
                scan_s3tokenizer(path, served, found)
            elif kind == "tiktoken":
                scan_tiktoken(path, served, found, known_urls)
            else:
                scan_declared(path, kind, served, found)
        except OSError as exc:
            raise FetchError(f"{path}: cannot read this cache ({exc.strerror or exc})") from None
    return found

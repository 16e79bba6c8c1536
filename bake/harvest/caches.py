"""What a job's caches hold, read offline: the assets and Hub commits that can be pinned, and what cannot.

Each DIR is a cache a job filled: an ``HF_HOME`` or a Hub cache, an ``XDG_CACHE_HOME``, a
``TIKTOKEN_*`` directory, a ``TMPDIR`` holding the clients' defaults, or any location of the
consumer table. Where to look below a DIR, how a cached file is named and which URL it came
from are the table's (``bake.consumers``); nothing here names a consumer. Nothing is guessed and
no server is asked:

- a Hub file is pinned at the commit its snapshot names, its sha256 proven from the blob's
  bytes against the blob's name (``bake.hub.scan``);
- a consumer's file is pinned when a URL its library's own table knows (or the manifest lists
  for it) gives that file's name, its bytes checked against the sha256 that table expects.

Everything else is a ``NotPinned`` with its reason: a file no known URL names (a declared
consumer's have none: the ``bake add`` line to run is given), a partial download, bytes that
do not match their name, a bad ref. Nothing outside the DIRs is read: links are judged by their
text and never followed, except the entrypoint's links into the baked assets, which are bake's
own and skipped. ``--diff ROOT`` counts a file that is not pinned, but whose path and bytes ROOT's
lock holds (a copy the entrypoint seeded, a checkpoint no installed table names), as baked
(``bake.harvest.diff``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from bake import consumers
from bake.asset import Asset
from bake.errors import FetchError, ManifestError
from bake.hub.scan import (
    KIND_OF_PREFIX,
    CachedCommit,
    NotPinned,
    read_regular,
    scan_cache,
    served_link,
    what_is,
)
from bake.hub.schema import parse_entry
from bake.locations import Location

log = logging.getLogger(__name__)

DEFAULT_SERVED_ROOT = "/opt/bake/assets"


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


def subs_below(loc: Location) -> list[str]:
    """Where a location is below the directory each variable of its chain names: ``${HF_HOME}/hub``
    gives ``hub``, and through its fallback ``${XDG_CACHE_HOME}/huggingface/hub``."""
    below = [loc.sub]
    if loc.fallback is not None:
        below += [os.path.join(sub, loc.sub) if loc.sub else sub for sub in subs_below(loc.fallback)]
    return below


def _names(path: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(path)]
    except OSError:
        return []


def _candidates(top: str, loc: Location, default_dirs: Sequence[str]) -> Iterator[tuple[str, bool]]:
    """(directory, named by its place) for each place under ``top`` the location may be: ``top/SUB``
    (or ``top`` itself, named SUB); for a SUB-less ``$VAR``, ``top`` and its subdirectories, named
    by their place when they bear a library's default directory name (``tiktoken-rs-cache``)."""
    base = os.path.basename(os.path.normpath(top))
    for sub in dict.fromkeys(subs_below(loc)):
        if sub:
            if _real_dir(os.path.join(top, sub)):
                yield os.path.join(top, sub), True
            if base == os.path.basename(sub):
                yield top, True
        else:
            yield top, base in default_dirs
            for name in sorted(_names(top)):
                if _real_dir(os.path.join(top, name)):
                    yield os.path.join(top, name), name in default_dirs


def _holds(path: str, consumer: consumers.Consumer, known: dict[str, str]) -> bool:
    """Does ``path`` hold this consumer's files (a repository folder; a file a known URL names, or named
    as its libraries name what they cache, with no library installed to say which URL)?"""
    names = _names(path)
    if isinstance(consumer, consumers.Hub):
        return any(n.startswith(tuple(KIND_OF_PREFIX)) for n in names)
    return any(n in known or consumer.cached_name(n) for n in names)


def places(
    dirs: Sequence[str], table: Sequence[consumers.Consumer], known: dict[str, dict[str, str]]
) -> list[tuple[consumers.Consumer, str]]:
    """(consumer, directory) for each cache under ``dirs``, each a real directory reached by no link.

    ``known`` maps each consumer's name to its known cached names and their URLs.
    """
    found: dict[str, consumers.Consumer] = {}
    for top in dirs:
        for consumer in table:
            for loc in consumer.locations:
                for path, named in _candidates(top, loc, consumer.default_dirs):
                    # A place named by its SUB is the consumer's; the Hub's names ("hub") prove less.
                    by_name = named and not isinstance(consumer, consumers.Hub)
                    if by_name or _holds(path, consumer, known[consumer.name]):
                        found.setdefault(os.path.normpath(path), consumer)
    return [(consumer, path) for path, consumer in found.items()]


def known_names(consumer: consumers.Consumer, manifest_urls: Sequence[str]) -> dict[str, str]:
    """Map each name the consumer caches a file under to the URL it came from, for every URL known."""
    names = {}
    for url in [*consumer.known_urls(), *manifest_urls]:
        path = consumer.path_for_url(url)
        if path is not None and consumer.owns(path):
            names[consumer.name_in_location(path)] = url
    return names


def sha256_of(path: str) -> str:
    """The sha256 of a regular file, read without following a link (``bake.hub.scan.read_regular``)."""
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
            if not served_link(entry.path, served):
                found.problems.append(
                    NotPinned(entry.path, f"a link to {os.readlink(entry.path)!r}: never followed")
                )
        elif stat.S_ISREG(mode):
            files.append((entry.name, entry.path, entry.stat(follow_symlinks=False).st_size))
        else:
            found.problems.append(NotPinned(entry.path, f"{what_is(mode)}, not a cached file"))
    return files


def _checked(
    path: str, expected: str | None, found: Found, mismatch: str, asset_path: str | None = None
) -> str | None:
    """The file's sha256, or None (a problem said) when it is unreadable or not ``expected``."""
    try:
        actual = sha256_of(path)
    except (OSError, ValueError) as exc:
        found.problems.append(NotPinned(path, f"cannot be read ({getattr(exc, 'strerror', None) or exc})"))
        return None
    if expected is not None and actual != expected:
        found.problems.append(NotPinned(path, f"sha256 {actual}, {mismatch} {expected}", asset_path))
        return None
    return actual


def scan_consumer(
    directory: str,
    consumer: consumers.Consumer,
    known: dict[str, str],
    served: str,
    found: Found,
) -> None:
    """Pin each file of a consumer's directory that a known URL names, its bytes as its library expects."""
    from bake.add import derive_name  # the name `bake add` gives the same URL and path

    libraries = ", ".join(consumer.libraries)
    for name, path, size in _files(directory, served, found):
        if consumer.partial.search(name):
            found.problems.append(NotPinned(path, consumer.partial_why))
            continue
        # The installed library's own naming first (vLLM's asset classes), then the tables and manifest.
        url = consumer.url_for_cached(name) or known.get(name)
        if url is None:
            why = consumer.why_unnamed(name) or _no_url(consumer, name)
            found.problems.append(NotPinned(path, why, consumer.prefix + name))
            continue
        asset = Asset("probe", consumer.prefix + name, "0" * 64, (url,), size)
        expected = consumer.library_sha256(asset)
        mismatch = f"not the sha256 {libraries} expects for {url}:"
        sha = _checked(path, expected, found, mismatch, asset.path)
        if sha is not None:
            named = derive_name(url, asset.path, keep_suffix=consumer.names_keep_suffix)
            found.assets.append(Asset(named, asset.path, sha, (url,), size))


def _no_url(consumer: consumers.Consumer, name: str) -> str:
    """Why a consumer's file with no known URL is not pinned, and the ``bake add`` line that pins it."""
    missing = [lib for lib in consumer.tables if not consumers.installed(lib)]
    if missing:
        asked = (
            f"{', '.join(missing)} is not installed here, so its own table was not asked; the manifest was"
        )
    else:
        asked = f"asked: the installed {', '.join(consumer.tables)}'s own table, and the manifest's entries"
    return (
        f"no URL known here gives {consumer.name} this name ({asked}); "
        f"pin it with `bake add URL --path {consumer.prefix}{name}`"
    )


def scan_declared(directory: str, consumer: consumers.Consumer, served: str, found: Found) -> None:
    """A declared consumer's files have no URL: each is named with the ``bake add`` line to run."""
    for base, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and _real_dir(os.path.join(base, d)))
        for _, path, _ in _files(base, served, found) if names else []:
            rel = os.path.relpath(path, directory)
            found.problems.append(
                NotPinned(
                    path,
                    f"a file of consumer {consumer.name!r}, whose origin no table names; "
                    f"pin it with `bake add URL --path {consumer.prefix}{rel}`",
                    consumer.prefix + rel,
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
        parse_entry(raw, 0)
    except ManifestError as exc:
        return NotPinned(commit.folder, f"not pinnable: {exc}")
    return None


def _scan_hub(path: str, served: str, found: Found) -> None:
    commits, problems = scan_cache(path, served)
    found.problems += problems
    for commit in commits:
        bad = check_commit(commit)
        found.problems += [bad] if bad else []
        found.commits += [] if bad else [commit]


def scan(
    dirs: Sequence[str],
    table: Sequence[consumers.Consumer],
    manifest_urls: Sequence[str],
) -> Found:
    """Read every cache under ``dirs`` for the consumers of ``table``; ``manifest_urls`` are the URLs the
    manifest lists, which name cached files too. Raises FetchError (exit 3) when a DIR cannot be read."""
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
    known = {c.name: known_names(c, manifest_urls) for c in table}
    for top in dirs:
        if not places([top], table, known):
            log.warning("%s: no cache of any consumer found there; nothing read from it", top)
    for consumer, path in places(dirs, table, known):
        try:
            if isinstance(consumer, consumers.Hub):
                _scan_hub(path, served, found)
            elif consumer.builtin:
                scan_consumer(path, consumer, known[consumer.name], served, found)
            else:
                scan_declared(path, consumer, served, found)
        except OSError as exc:
            raise FetchError(f"{path}: cannot read this cache ({exc.strerror or exc})") from None
    return found

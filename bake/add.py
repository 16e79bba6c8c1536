"""``bake add``: fetch a new file once through the engine, then append its complete entry to the manifest.

The fetch goes through the same engine as ``bake fetch`` (mirrors, resume,
cache). A file whose sha256 is not known yet downloads into a partial keyed by
its URL; once complete it is hashed and its cache object renamed to its
sha256, so a later ``bake fetch`` with the same cache is a cache hit. The
manifest is edited as text plus one entry rendered by tomlkit: every byte
outside the new entry survives, comments and odd formatting included.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from bake import atomic, consumers, manifest
from bake.cache import Cache
from bake.errors import FetchError, ManifestError, UsageError
from bake.fetch import FetchOptions, fetch_assets
from bake.hashes import sha256_file
from bake.manifest import Asset, Assets

log = logging.getLogger(__name__)

_ASSET_HEADER = re.compile(r"^\s*\[\[\s*asset\s*\]\]")
_SHA256_KEY = re.compile(r"""^(\s*)(?:sha256|"sha256"|'sha256')\s*=""")


def _read(path: Path, allow_http: bool) -> tuple[str, Assets]:
    text = manifest.read_manifest_text(path)
    return text, manifest.parse_manifest(text, source=str(path), allow_http=allow_http)


def _write(path: Path, text: str) -> None:
    """Replace the manifest atomically, keeping its mode: a reader sees the old or the new file."""
    atomic.write_file(path, text.encode("utf-8"), mode=path.stat().st_mode & 0o7777)


def derive_path(url: str, table: Sequence[consumers.Consumer]) -> str:
    """Return the manifest path the owning consumer's naming rule gives ``url``.

    Raises UsageError asking for ``--path`` when no consumer names it.
    """
    for consumer in table:
        path = consumer.path_for_url(url)
        if path is not None:
            return path
    rules = ", ".join(c.name for c in table if c.builtin)
    raise UsageError(
        f"{manifest.redact_url(url)}: no consumer's naming rule ({rules}) names this URL; "
        "pass --path (for example --path <consumer>/<file>)"
    )


def derive_name(url: str, path: str) -> str:
    """A name for the entry: the path's file stem (a model name), or the URL's for a SHA-1 cache name."""
    leaf = PurePosixPath(path).name
    stem = PurePosixPath(urlsplit(url).path).name.split(".")[0]
    # A SHA-1 cache name says nothing to a reader; the URL's file name does.
    candidate = stem if re.fullmatch(r"[0-9a-f]{40}", leaf) else PurePosixPath(leaf).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", candidate).strip("-.")
    if not name:
        raise UsageError(f"{manifest.redact_url(url)}: cannot derive a name from it; pass --name")
    return name


def _fetch_unknown(url: str, name: str, options: FetchOptions) -> tuple[str, int]:
    """Fetch ``url``, whose hash is unknown; return its sha256 and size (cached by that sha256)."""
    key = hashlib.sha256(url.encode()).hexdigest()  # the partial is keyed by the URL until the hash is known
    cache = Cache(options.cache_dir)
    cache.ensure()
    # Inside the cache, so the engine installs the download by a hard link, not a copy.
    with tempfile.TemporaryDirectory(prefix="add.", dir=cache.root) as tmp:
        probe = Asset(name, "download", key, (url,))
        fetch_assets([probe], Path(tmp), replace(options, unknown_sha256=True))
        fetched = Path(tmp) / "download"
        sha, size = sha256_file(fetched), fetched.stat().st_size
    with cache.lock(sha), cache.lock(key):
        if cache.object_path(sha).exists():
            cache.object_path(key).unlink(missing_ok=True)
        else:
            os.replace(cache.object_path(key), cache.partial_path(sha))
            cache.commit(sha)
    return sha, size


def _fetch_known(asset: Asset, options: FetchOptions) -> int:
    """Fetch and verify ``asset`` through the engine; return its size."""
    cache = Cache(options.cache_dir)
    cache.ensure()
    with tempfile.TemporaryDirectory(prefix="add.", dir=cache.root) as tmp:
        fetch_assets([asset], Path(tmp), options)
        return (Path(tmp) / asset.path).stat().st_size


def render_entry(asset: Asset) -> str:
    """Return one ``[[asset]]`` table as tomlkit writes it, keys in the manifest's usual order."""
    import tomlkit  # lazily: the fetch stage runs on a bare python3 without it

    table = tomlkit.table()
    table.add("name", asset.name)
    table.add("path", asset.path)
    table.add("sha256", asset.sha256)
    if asset.size is not None:
        table.add("size", asset.size)
    table.add("urls", list(asset.urls))
    if asset.groups:
        table.add("groups", list(asset.groups))
    doc = tomlkit.document()
    doc.add("asset", tomlkit.aot())
    doc["asset"].append(table)
    return tomlkit.dumps(doc)


def _append(text: str, entry: str) -> str:
    separator = "" if text.endswith("\n\n") or not text else "\n" if text.endswith("\n") else "\n\n"
    return text + separator + entry


def _check_library(asset: Asset, table: Sequence[consumers.Consumer]) -> None:
    owner = consumers.owner(asset.path, table)
    expected = owner.library_sha256(asset) if owner else None
    if expected is not None and expected != asset.sha256:
        raise FetchError(
            f"{manifest.redact_url(asset.urls[0])}: fetched sha256 {asset.sha256}, but the installed "
            f"{owner.name} expects {expected} for {asset.path}; it would re-download this file. "
            "Check the URL, or pin the library version that matches these bytes"
        )


def add(
    manifest_path: Path,
    url: str,
    options: FetchOptions,
    *,
    name: str | None = None,
    path: str | None = None,
    groups: Sequence[str] = (),
    sha256: str | None = None,
) -> Asset:
    """Fetch ``url`` and append its entry to the manifest; return the new asset.

    Raises UsageError/ManifestError (exit 2: no naming rule, a duplicate, a bad
    entry) before anything is fetched where it can; FetchError (exit 3) when the
    bytes fail ``sha256`` or a consumer's own table. Nothing is written on any error.
    """
    text, assets = _read(manifest_path, options.allow_http)
    table = assets.consumers()
    manifest.check_url(url, allow_http=options.allow_http, where="bake add")
    path = path or derive_path(url, table)
    name = name or derive_name(url, path)
    for field, value in (("name", name), ("path", path)):
        taken = next((a for a in assets if getattr(a, field) == value), None)
        if taken is not None:
            raise UsageError(
                f"{manifest_path}: {field} {value!r} is already used by asset {taken.name!r}; "
                f"nothing was written (pass another --{field}, or edit that entry)"
            )
    # The entry's rules (path, name, groups) are checked before any byte is fetched.
    draft = Asset(name, path, (sha256 or "0" * 64).lower(), (url,), None, tuple(groups))
    manifest.parse_manifest(_append(text, render_entry(draft)), source=str(manifest_path), allow_http=True)
    if sha256 is not None:
        sha256 = draft.sha256
        size = _fetch_known(draft, options)
    else:
        sha256, size = _fetch_unknown(url, name, options)
    asset = Asset(name, path, sha256, (url,), size, tuple(groups))
    _check_library(asset, table)
    new_text = _append(text, render_entry(asset))
    # The new text must parse to exactly the old manifest plus this entry.
    if list(manifest.parse_manifest(new_text, source=str(manifest_path), allow_http=True)) != [
        *assets,
        asset,
    ]:
        raise ManifestError(
            f"{manifest_path}: appending the entry would change other entries; add it by hand"
        )
    _write(manifest_path, new_text)
    return asset


def _insert_size(text: str, index: int, size: int) -> str | None:
    """Insert ``size = N`` after the sha256 line of the ``index``-th ``[[asset]]``; None if not found.

    tomlkit can only append a key at the end of a table, where it lands after
    the comments that introduce the next entry; beside ``sha256`` it reads right.
    """
    lines = text.splitlines(keepends=True)
    seen = -1
    for i, line in enumerate(lines):
        if _ASSET_HEADER.match(line):
            seen += 1
        elif seen == index and line.endswith("\n") and (match := _SHA256_KEY.match(line)):
            lines.insert(i + 1, f"{match.group(1)}size = {size}\n")
            return "".join(lines)
    return None


def fill_size(manifest_path: Path, name: str, options: FetchOptions) -> Asset:
    """Fetch and verify the named entry through the engine, and write its missing ``size``; return it.

    Raises UsageError for an unknown name, FetchError when it cannot be fetched
    or verified. An entry that already has a size is verified and left as is.
    """
    text, assets = _read(manifest_path, options.allow_http)
    index = next((i for i, a in enumerate(assets) if a.name == name), None)
    if index is None:
        known = ", ".join(a.name for a in assets)
        raise UsageError(f"{manifest_path}: no asset named {name!r}; known names: {known}")
    asset = assets[index]
    size = _fetch_known(asset, options)
    if asset.size is not None:
        return asset
    filled = replace(asset, size=size)
    expected = [*assets[:index], filled, *assets[index + 1 :]]
    new_text = _insert_size(text, index, size)
    if new_text is None or list(manifest.parse_manifest(new_text, allow_http=True)) != expected:
        import tomlkit  # lazily, as in render_entry

        doc = tomlkit.parse(text)
        doc["asset"][index]["size"] = size
        new_text = tomlkit.dumps(doc)
    _write(manifest_path, new_text)
    return filled

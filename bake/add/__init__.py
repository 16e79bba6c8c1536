"""``bake add``: fetch a new file once through the engine, then append its complete entry to the manifest.

The fetch goes through the same engine as ``bake fetch`` (mirrors, resume,
cache, --max-size). A file whose sha256 is not known yet downloads into a
partial keyed by its URL; once complete it is hashed and committed to the cache
under that digest, so a later ``bake fetch`` with the same cache is a cache hit.
The bytes hashed are the bytes as the server stores them (a Content-Encoding
is refused), which are what ``bake fetch`` verifies. The manifest is edited as
text plus one entry rendered by tomlkit: every byte outside the new entry
survives, comments and odd formatting included. The edit follows a symlinked
manifest to its target and runs under a lock, on the manifest as it is then
(bake.manifestedit), so two adds at once keep both entries. URL credentials (userinfo,
and query parameters such as ``?token=``) are never written: they belong in a mirror.

A whole Hub repository (``hf://ORG/REPO[@REV]``) is pinned by ``bake.add.hub_repo``, over the
Hub's HTTP API as ``bake.add.hub_api`` reads it (the commit, the checked listing, a file's bytes).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from bake import consumers, manifest, manifestedit
from bake.asset import Asset
from bake.errors import FetchError, ManifestError, UsageError
from bake.fetch import FetchOptions, fetch_to_cache
from bake.fetch.progress import Progress
from bake.hashes import GIT_SHA1_HEX, bare_sha256
from bake.manifest import Manifest
from bake.urls import check_url, is_credential_param, redact_url

log = logging.getLogger(__name__)

_ASSET_HEADER = re.compile(r"^\s*\[\[\s*asset\s*\]\]")
_SHA256_KEY = re.compile(r"""^(\s*)(?:sha256|"sha256"|'sha256')\s*=""")


def _read(path: Path, allow_http: bool) -> tuple[str, Manifest]:
    """The manifest's text and entries; a missing or empty manifest is one with no entries yet."""
    text = manifest.read_manifest_text(path) if os.path.exists(path) else ""
    return text, manifest.parse_manifest(text, source=str(path), allow_http=allow_http, allow_empty=True)


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
        f"{redact_url(url)}: no consumer's naming rule ({rules}) names this URL; "
        "pass --path (for example --path <consumer>/<file>)"
    )


def derive_name(url: str, path: str, *, keep_suffix: bool = False) -> str:
    """A name for the entry: the path's file stem (a model name), or the URL's for a SHA-1 cache name;
    with ``keep_suffix`` (the owning consumer's ``names_keep_suffix``), the path's whole file name."""
    leaf = PurePosixPath(path).name
    stem = PurePosixPath(urlsplit(url).path).name.split(".")[0]
    # A SHA-1 cache name says nothing to a reader; the URL's file name does.
    candidate = stem if GIT_SHA1_HEX.fullmatch(leaf) else leaf if keep_suffix else PurePosixPath(leaf).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", candidate).strip("-.")
    if not name:
        raise UsageError(f"{redact_url(url)}: cannot derive a name from it; pass --name")
    return name


def _fetch_unknown(
    url: str, key_url: str, name: str, options: FetchOptions, progress: Progress | None
) -> tuple[str, int]:
    """Fetch ``url``, whose hash is unknown, into the cache; return its sha256 and size.

    The partial is keyed by ``key_url`` (the URL as written, without credentials) until
    the hash is known; the object is committed under the digest of what arrived.
    """
    key = hashlib.sha256(key_url.encode()).hexdigest()
    probe = Asset(name, "download", key, (url,))
    (record,) = fetch_to_cache([probe], replace(options, unknown_sha256=True), progress)
    return record.sha256, record.size


def _fetch_known(asset: Asset, options: FetchOptions, progress: Progress | None) -> int:
    """Fetch and verify ``asset`` into the cache; return its size."""
    (record,) = fetch_to_cache([asset], options, progress)
    return record.size


def without_credentials(url: str) -> str:
    """``url`` without ``user:password@`` and without query parameters that look like credentials
    (``?token=``, a presigned URL's signature), with a warning saying where credentials belong."""
    parts = urlsplit(url)
    query = [p for p in parts.query.split("&") if p] if parts.query else []
    kept = [p for p in query if not is_credential_param(p.partition("=")[0])]
    in_userinfo = parts.username is not None or parts.password is not None
    if not in_userinfo and kept == query:
        return url
    dropped = [p.partition("=")[0] for p in query if p not in kept]
    what = ["USER:PASSWORD@" if in_userinfo else "", *(f"?{name}=" for name in dropped)]
    log.warning(
        "the credentials in %s (%s) are not written to the manifest, which is committed and read by "
        "every build; give them to builds as a mirror instead: --mirror PREFIX=REPLACEMENT, the "
        "REPLACEMENT carrying them (or BAKE_MIRRORS), and in a docker build through the bake_mirrors secret",
        redact_url(url),
        ", ".join(w for w in what if w),
    )
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="&".join(kept)).geturl()


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


def _check_library(asset: Asset, table: Sequence[consumers.Consumer]) -> None:
    owner = consumers.owner(asset.path, table)
    expected = owner.library_sha256(asset) if owner else None
    if expected is not None and expected != asset.sha256:
        raise FetchError(
            f"{redact_url(asset.urls[0])}: fetched sha256 {asset.sha256}, but the installed "
            f"{owner.name} expects {expected} for {asset.path}; it would re-download this file. "
            "Check the URL, or pin the library version that matches these bytes"
        )


def _check_unused(assets: Manifest, manifest_path: Path, name: str, path: str) -> None:
    for field, value in (("name", name), ("path", path)):
        taken = next((a for a in assets if getattr(a, field) == value), None)
        if taken is not None:
            raise UsageError(
                f"{manifest_path}: {field} {value!r} is already used by asset {taken.name!r}; "
                f"nothing was written (pass another --{field}, or edit that entry)"
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
    progress: Progress | None = None,
) -> Asset:
    """Fetch ``url`` and append its entry to the manifest; return the new asset.

    Raises UsageError/ManifestError (exit 2: no naming rule, a duplicate, a bad
    entry) before anything is fetched where it can; FetchError (exit 3) when the
    bytes fail ``sha256`` or a consumer's own table. Nothing is written on any error.
    """
    text, assets = _read(manifest_path, options.allow_http)
    table = assets.consumers()
    check_url(url, allow_http=options.allow_http, where="bake add")
    written = without_credentials(url)
    path = path or derive_path(written, table)
    owner = consumers.owner(path, table)
    name = name or derive_name(written, path, keep_suffix=bool(owner and owner.names_keep_suffix))
    _check_unused(assets, manifest_path, name, path)
    # The entry's rules (path, name, groups) are checked before any byte is fetched.
    draft = Asset(name, path, str(bare_sha256(sha256 or "0" * 64)), (written,), None, tuple(groups))
    manifest.parse_manifest(
        manifestedit.appended(text, render_entry(draft)), source=str(manifest_path), allow_http=True
    )
    manifestedit.check_writable(manifest_path)
    digest, size = _fetch_unknown(url, written, name, options, progress)
    if sha256 is not None and digest != draft.sha256:
        raise FetchError(
            f"{redact_url(url)}: its bytes hash to {digest}, not to the --sha256 {draft.sha256} "
            "given; nothing was written. Check the hash you passed (and that the URL is the file you "
            "meant); the bytes stay in the cache under their own sha256"
        )
    asset = Asset(name, path, digest, (written,), size, tuple(groups))
    _check_library(asset, table)
    with manifestedit.locked(manifest_path) as target:
        text, assets = _read(target, options.allow_http)  # as it is now: another add may have landed
        _check_unused(assets, manifest_path, name, path)
        new_text = manifestedit.appended(text, render_entry(asset))
        # The new text must parse to exactly the old manifest plus this entry.
        if list(manifest.parse_manifest(new_text, source=str(manifest_path), allow_http=True)) != [
            *assets,
            asset,
        ]:
            raise ManifestError(
                f"{manifest_path}: appending the entry would change other entries; add it by hand"
            )
        manifestedit.replace(target, new_text)
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


def fill_size(
    manifest_path: Path, name: str, options: FetchOptions, progress: Progress | None = None
) -> Asset:
    """Fetch and verify the named entry through the engine, and write its missing ``size``; return it.

    Raises UsageError for an unknown name, FetchError when it cannot be fetched
    or verified. An entry that already has a size is verified and left as is.
    """
    _, assets = _read(manifest_path, options.allow_http)
    asset = _named(assets, manifest_path, name)
    if asset.size is None:
        manifestedit.check_writable(manifest_path)
    size = _fetch_known(asset, options, progress)
    if asset.size is not None:
        return asset
    with manifestedit.locked(manifest_path) as target:
        text, assets = _read(target, options.allow_http)  # as it is now
        index = next((i for i, a in enumerate(assets) if a.name == name), None)
        current = _named(assets, manifest_path, name)
        if current.size is not None or current.sha256 != asset.sha256:
            raise ManifestError(
                f"{manifest_path}: asset {name!r} changed while it was fetched; run this again"
            )
        filled = replace(current, size=size)
        expected = [*assets[:index], filled, *assets[index + 1 :]]
        new_text = _insert_size(text, index, size)
        if new_text is None or list(manifest.parse_manifest(new_text, allow_http=True)) != expected:
            import tomlkit  # lazily, as in render_entry

            doc = tomlkit.parse(text)
            doc["asset"][index]["size"] = size
            new_text = tomlkit.dumps(doc)
        manifestedit.replace(target, new_text)
    return filled


def _named(assets: Manifest, manifest_path: Path, name: str) -> Asset:
    found = next((a for a in assets if a.name == name), None)
    if found is None:
        known = ", ".join(a.name for a in assets)
        raise UsageError(f"{manifest_path}: no asset named {name!r}; known names: {known}")
    return found

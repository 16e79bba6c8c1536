"""The Hub's own cache layout under ``<assets>/hub``, and the records that serve it at run time.

huggingface_hub trusts a cache offline when ``<repo folder>/snapshots/<commit>/<path>``
exists (a relative link to ``../../blobs/<etag>``), and resolves a branch through
``refs/<branch>``, a file holding the commit with no newline. For a whole-repository
entry it also reads ``trees/<commit>.json`` (format 1) to tell a complete snapshot
from a partial one. ``seal`` writes exactly these, from the manifest alone, so the
layer is the same on every builder; ``fetch-assets`` then fixes every mtime.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

from bake.errors import UsageError
from bake.hubtable import PREFIX, HubEntry, blob_path, selected_entries

TREE_FORMAT_VERSION = 1  # huggingface_hub._tree_cache.TREE_CACHE_FORMAT_VERSION

# huggingface_hub's precedence: HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE, then HF_HOME/hub,
# then ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/hub (constants.py). One bake.serve
# ``loc`` each, chained through @ID fallbacks; only the last serves files.
SERVE_LOC = "hub.0"
SERVE_LOCS = (
    ("loc", "hub.xdg", "-", "under", "XDG_CACHE_HOME", "huggingface", "$HOME/.cache"),
    ("loc", "hub.home", "-", "under", "HF_HOME", "hub", "@hub.xdg"),
    ("loc", "hub.legacy", "-", "under", "HUGGINGFACE_HUB_CACHE", "", "@hub.home"),
    ("loc", SERVE_LOC, "hub", "under", "HF_HUB_CACHE", "", "@hub.legacy"),
)


def snapshot_links(entry: HubEntry) -> dict[str, str]:
    """Map each snapshot file (relative to the hub root) to its relative link target."""
    links = {}
    for f in entry.files:
        up = "../" * (len(PurePosixPath(f.path).parts) + 1)
        links[f"{entry.folder}/snapshots/{entry.commit}/{f.path}"] = f"{up}blobs/{f.etag}"
    return links


def tree_json(entry: HubEntry) -> str:
    """``trees/<commit>.json`` as huggingface_hub's ``write_tree_cache`` writes it, byte for byte."""
    files = {}
    for f in entry.files:
        info: dict = {"size": f.size, "blob_id": f.blob}
        if f.lfs:
            info["lfs_sha256"] = f.sha256
            info["lfs_size"] = f.size
        files[f.path] = info
    return json.dumps({"format_version": TREE_FORMAT_VERSION, "files": files}, indent=1)


def data_files(entry: HubEntry) -> dict[str, str]:
    """Map the small files seal writes (relative to the hub root) to their text: refs and the tree."""
    files = {}
    if entry.ref is not None:
        files[f"{entry.folder}/refs/{entry.ref}"] = entry.commit
    # A tree listing claims the snapshot is the whole repository: huggingface_hub trusts it,
    # online and offline, so it is written only when no pattern narrowed the files.
    if entry.whole_repo:
        files[f"{entry.folder}/trees/{entry.commit}.json"] = tree_json(entry)
    return files


def _place_link(path: Path, target: str) -> None:
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_symlink() or path.exists():
        raise UsageError(f"{path}: expected a link to {target}, found something else; remove it and reseal")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _place_file(path: Path, text: str) -> None:
    if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8") == text:
        return
    if path.is_symlink() or path.exists():
        raise UsageError(
            f"{path}: expected bake's own {path.name}, found something else; remove it and reseal"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write(dest: Path, assets: list) -> dict[str, tuple[int, str]]:
    """Add snapshot links, refs and tree listings for every selected Hub entry under ``dest/hub``.

    Call after fetch has verified the blobs, before the tree is made read-only. It is
    idempotent. Returns the files it wrote (refs and trees) as ``{path: (size, sha256)}``,
    for the index: the entrypoint copies into node storage only what it can verify.
    Raises UsageError when a path it must write holds something else.
    """
    root = Path(dest) / PREFIX
    written: dict[str, tuple[int, str]] = {}
    for entry in selected_entries(assets):
        for f in entry.files:
            if not (Path(dest) / blob_path(entry.folder, f.etag)).is_file():
                raise UsageError(
                    f"{dest}: hub {entry.label} blob for {f.path!r} is missing; run `bake fetch` first"
                )
        for name, target in snapshot_links(entry).items():
            _place_link(root / name, target)
        for name, text in data_files(entry).items():
            _place_file(root / name, text)
            data = text.encode()
            written[f"{PREFIX}/{name}"] = (len(data), hashlib.sha256(data).hexdigest())
    return written


def serve_records(assets: list) -> list[tuple[str, ...]]:
    """Return the bake.serve records for the selected Hub entries (SERVE_FORMAT.md), kinds in order.

    ``loc`` lines for huggingface_hub's cache precedence, a ``file`` line per blob, ref and
    tree (each copy locked where huggingface_hub locks: ``.locks/<repo folder>/…``), and a
    ``link`` line per snapshot file. Empty when no Hub entry is selected.
    """
    entries = selected_entries(assets)
    if not entries:
        return []
    files: dict[str, tuple[str, ...]] = {}
    links: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        for f in entry.files:
            name = f"{entry.folder}/blobs/{f.etag}"
            lock = f".locks/{entry.folder}/{f.etag}.lock"
            files[name] = ("file", SERVE_LOC, f"{PREFIX}/{name}", name, str(f.size), lock)
        for name, text in data_files(entry).items():
            lock = f".locks/{entry.folder}/{name.split('/', 1)[1]}.lock"
            size = str(len(text.encode()))
            files[name] = ("file", SERVE_LOC, f"{PREFIX}/{name}", name, size, lock)
        for name, target in snapshot_links(entry).items():
            links[name] = ("link", SERVE_LOC, name, target)
    return [*SERVE_LOCS, *(files[n] for n in sorted(files)), *(links[n] for n in sorted(links))]

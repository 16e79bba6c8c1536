"""The Hub's own cache layout under ``<assets>/hub``, and the records that serve it at run time.

huggingface_hub trusts a cache offline when ``<repo folder>/snapshots/<commit>/<path>``
exists (a relative link to ``../../blobs/<etag>``), and resolves a branch through
``refs/<branch>``, a file holding the commit with no newline. For a whole-repository
entry it also reads ``trees/<commit>.json`` (format 1) to tell a complete snapshot
from a partial one. The Hub's entry of the consumer table (``bake.consumers.Hub``) hands
these to ``seal``, from the manifest alone, so the layer is the same on every builder;
``fetch-assets`` then fixes every mtime.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import PurePosixPath

from bake.hubtable import PREFIX, HubEntry, selected_entries
from bake.locations import Location

TREE_FORMAT_VERSION = 1  # huggingface_hub._tree_cache.TREE_CACHE_FORMAT_VERSION

# huggingface_hub's precedence (its constants.py): HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE,
# then HF_HOME/hub, then ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/hub. In bake.serve each
# fallback is a ``loc`` of its own, named by CHAIN_IDS; only SERVE_LOC serves files.
CACHE = Location(
    "HF_HUB_CACHE",
    fallback=Location(
        "HUGGINGFACE_HUB_CACHE",
        fallback=Location(
            "HF_HOME", "hub", fallback=Location("XDG_CACHE_HOME", "huggingface", "$HOME/.cache")
        ),
    ),
)
SERVE_LOC = "hub.0"
CHAIN_IDS = {"HUGGINGFACE_HUB_CACHE": "hub.legacy", "HF_HOME": "hub.home", "XDG_CACHE_HOME": "hub.xdg"}


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


def serve_records(assets: list) -> list[tuple[str, ...]]:
    """Return the bake.serve records for the Hub entries ``assets`` select whole (docs/SERVE_FORMAT.md)."""
    return entry_records(selected_entries(assets))


def entry_records(entries: Sequence[HubEntry]) -> list[tuple[str, ...]]:
    """Return the bake.serve records for ``entries``, kinds in order.

    ``loc`` lines for huggingface_hub's cache precedence, a ``file`` line per blob, ref and
    tree (each copy locked where huggingface_hub locks: ``.locks/<repo folder>/…``), and a
    ``link`` line per snapshot file. Empty when there is no entry.
    """
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
    locs = CACHE.records(SERVE_LOC, PREFIX, CHAIN_IDS)
    return [*locs, *(files[n] for n in sorted(files)), *(links[n] for n in sorted(links))]

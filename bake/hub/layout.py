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

import functools
import hashlib
import json
from collections.abc import Sequence

from bake import paths, servefile
from bake.hub.entry import PREFIX, HubEntry

TREE_FORMAT_VERSION = 1  # huggingface_hub._tree_cache.TREE_CACHE_FORMAT_VERSION


def snapshot_links(entry: HubEntry) -> dict[str, str]:
    """Map each snapshot file (relative to the hub root) to its relative link target."""
    links = {}
    for f in entry.files:
        up = "../" * (f.path.count("/") + 2)  # a normalised relative path: one level per separator
        links[f"{entry.folder}/snapshots/{entry.commit}/{f.path}"] = f"{up}blobs/{f.etag}"
    return links


@functools.lru_cache(maxsize=64)  # seal_files and entry_records both need it; a large one is slow to dump
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


def unit_records(entry: HubEntry) -> dict[str, dict]:
    """What the repository's own unit holds beside its small blobs, relative to the asset root: each
    snapshot link (``{"link": target}``) and each file seal writes (``{"sha256", "size"}``)."""
    links = snapshot_links(entry)
    records: dict[str, dict] = {f"{PREFIX}/{name}": {"link": to} for name, to in links.items()}
    for name, text in data_files(entry).items():
        data = text.encode()
        records[f"{PREFIX}/{name}"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return records


# bake's own directory in a Hub cache: inside huggingface_hub's lock directory, which its cache
# scan skips, so it never reads as a repository.
STATE = ".locks/.bake"


def _entry_parts(entry: HubEntry, files: dict, links: dict, dirs: dict, places: list) -> None:
    """Add one entry's records to the maps ``entry_records`` gathers (keyed, so shared blobs count once).

    A commit whose every file is baked is linked whole in the linked view: huggingface_hub
    never writes into a complete snapshot directory. A narrowed one gets a link per file, in
    real directories it may add files to. Refs and tree listings are copied: it rewrites them.
    """
    snapshot = f"{entry.folder}/snapshots/{entry.commit}"
    for d in (entry.folder, f"{entry.folder}/snapshots"):
        dirs[d] = "both"
    dirs[f"{entry.folder}/blobs"] = "copied"
    inside = {d for f in entry.files for d in paths.parents(f"{snapshot}/{f.path}")} - set(dirs)
    for d in inside:
        dirs.setdefault(d, "copied" if entry.whole_repo else "both")
    if not entry.whole_repo:
        dirs[snapshot] = "both"
    places.append(
        servefile.Place(PREFIX, "link" if entry.whole_repo else "tree", f"{PREFIX}/{snapshot}", snapshot)
    )
    for f in entry.files:
        name = f"{entry.folder}/blobs/{f.etag}"
        files[name] = servefile.File(PREFIX, "copied", name, f.size, f.sha256)
    for name, text in data_files(entry).items():
        data = text.encode()
        for d in paths.parents(name):
            dirs[d] = "both"
        files[name] = servefile.File(PREFIX, "both", name, len(data), hashlib.sha256(data).hexdigest())
        places.append(servefile.Place(PREFIX, "copy", f"{PREFIX}/{name}", name))
    links.update(snapshot_links(entry))


def entry_records(entries: Sequence[HubEntry]) -> list[servefile.Record]:
    """Return the bake.serve records for ``entries`` after the Hub's ``loc`` records: the set, its
    directories, placements, files (blobs, refs, tree listings) and snapshot links. Empty when
    there is no entry."""
    if not entries:
        return []
    files: dict[str, servefile.File] = {}
    links: dict[str, str] = {}
    dirs: dict[str, str] = {".": "both"}
    places: list[servefile.Place] = []
    for entry in entries:
        _entry_parts(entry, files, links, dirs, places)
    parts: list[servefile.Record] = [servefile.Dir(PREFIX, view, d) for d, view in dirs.items()]
    parts += [*places, *files.values()]
    parts += [servefile.Link(PREFIX, name, target) for name, target in links.items()]
    shown = servefile.shown(f"{PREFIX}/{e.folder}" for e in sorted(entries, key=lambda e: e.folder))
    return [servefile.served_set(PREFIX, STATE, PREFIX, shown, parts), *parts]

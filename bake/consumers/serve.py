"""The consumers' records of ``bake.serve``: each consumer's locations and files, in the table's name order.

``bake.servefile`` owns the format; this module says what each consumer puts in it. A
consumer whose locations mirror its asset directory gets its files placed whole
(``mirrored``); the Hub gets huggingface_hub's cache layout (``bake.hub.layout``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Protocol

from bake import servefile
from bake.hub import layout
from bake.hub.entry import HubEntry
from bake.locations import Location

SERVE_NAME = servefile.NAME
SERVE_HEADER = servefile.HEADER
# bake's own directory inside each location a consumer with no lock layout of its own serves:
# its lock, stamps and partials (docs/SERVE_FORMAT.md).
STATE = ".bake"


class BakedFile(Protocol):
    """What the table needs of a baked file (``bake.index.LockedFile``)."""

    path: str
    size: int | None
    sha256: str


class ServedConsumer(Protocol):
    """What the records need of a consumer (``bake.consumers.entries.Consumer``)."""

    name: str

    def owns(self, path: str) -> bool: ...

    def name_in_location(self, path: str) -> str: ...

    def loc_records(self) -> list[servefile.Loc]: ...

    def serve_records(
        self, files: Sequence[BakedFile], aliases: Mapping[str, str]
    ) -> list[servefile.Record]: ...


def loc_records(
    name: str, locations: Sequence[Location], chain_ids: Mapping[str, str]
) -> list[servefile.Loc]:
    """Return the ``loc`` records of a consumer's locations (IDs ``<name>.<i>``), each after what its
    FALLBACK names."""
    loc_ids = [f"{name}.{i}" for i in range(len(locations))]
    return [
        record
        for loc_id, loc in zip(loc_ids, locations, strict=True)
        for record in loc.records(loc_id, name, chain_ids)
    ]


def mirrored(
    consumer: ServedConsumer, files: Sequence[BakedFile], aliases: Mapping[str, str]
) -> list[servefile.Record]:
    """Return the records of a consumer whose locations mirror its asset directory file for file.

    The linked view places that directory whole; ``aliases`` (link paths from the asset root,
    seal's) are links beside the files that are not served, removed after the placement.
    """
    name = consumer.name
    served = [
        servefile.File(name, "both", consumer.name_in_location(f.path), int(f.size or 0), f.sha256)
        for f in files
    ]
    skips = [consumer.name_in_location(a) for a in aliases if consumer.owns(a)]
    parts = servefile.tree_records(name, name, served, skips)
    shown = servefile.shown(_shown_names(files, aliases))
    return [*consumer.loc_records(), servefile.served_set(name, STATE, name, shown, parts), *parts]


def hub(consumer: ServedConsumer, entries: Sequence[HubEntry]) -> list[servefile.Record]:
    """The Hub's chain of ``loc`` records, then the layout's set, directories, placements, files and links."""
    if not entries:
        return []
    return [*consumer.loc_records(), *layout.entry_records(entries)]


def _shown_names(files: Sequence[BakedFile], aliases: Mapping[str, str]) -> list[str]:
    """How the ready line names each file: a nested file by its first two components (which
    repository or corpus), a file with an alias link beside it by the alias (``tiktoken/o200k_base``)."""
    alias_of = {}
    for alias, target in aliases.items():
        parent = PurePosixPath(alias).parent
        alias_of[str(parent / target)] = str(parent / PurePosixPath(alias).stem)
    names = []
    for f in sorted(files, key=lambda f: f.path):
        parts = f.path.split("/")
        names.append("/".join(parts[:2]) if len(parts) > 2 else alias_of.get(f.path, f.path))
    return names


def serve_records(
    consumers: Sequence[ServedConsumer], files: Sequence[BakedFile], aliases: Mapping[str, str] | None = None
) -> list[servefile.Record]:
    """Return every record of ``bake.serve``: each consumer's, in the table's name order.

    Only consumers that own a file get records: a consumer with nothing baked leaves its
    locations alone. ``aliases`` are seal's alias links (paths from the asset root).
    """
    records: list[servefile.Record] = []
    for consumer in sorted(consumers, key=lambda c: c.name):
        owned = sorted((f for f in files if consumer.owns(f.path)), key=lambda f: f.path)
        if owned:
            records += consumer.serve_records(owned, aliases or {})
    return records


def serve_text(
    consumers: Sequence[ServedConsumer], files: Sequence[BakedFile], aliases: Mapping[str, str] | None = None
) -> str:
    """Return ``bake.serve`` (v1, docs/SERVE_FORMAT.md) for ``files`` baked for ``consumers``."""
    return servefile.write(serve_records(consumers, files, aliases))

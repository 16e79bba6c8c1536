"""Read ``bake.serve``, the consumer locations `bake seal` writes beside the lock, as data.

Format v1 (docs/SERVE_FORMAT.md; ``bake.servefile`` writes and reads it). This reader checks an
image's copy strictly, so a damaged or newer file fails the location tests by name. Images
sealed before that file existed carry the built-in consumers only in their entrypoint;
``legacy_serve`` derives those from the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bake import servefile
from bake.consumers import BUILTINS, SERVE_HEADER, serve_text
from bake.index import LockedFile


class ServeError(ValueError):
    """``bake.serve`` cannot be read: the message names the line and what is wrong with it."""


@dataclass(frozen=True)
class Location:
    """One lookup location of one consumer (a ``loc`` record)."""

    id: str
    consumer: str
    mode: str
    var: str
    sub: str
    fallback: str

    def describe(self) -> str:
        """Return the location as a manifest spells it: ``$VAR`` or ``${VAR:-DEFAULT}/SUB``."""
        if self.mode == "export":
            return f"${self.var}"
        return f"${{{self.var}:-{self.fallback}}}" + (f"/{self.sub}" if self.sub else "")


@dataclass(frozen=True)
class ServedFile:
    """A baked file served at a location (a ``file`` record)."""

    loc: str
    asset: str
    name: str
    size: int


@dataclass(frozen=True)
class Link:
    """A relative link inside a location (a ``link`` record)."""

    loc: str
    name: str
    target: str


@dataclass(frozen=True)
class Serve:
    """Everything one ``bake.serve`` says."""

    locations: tuple[Location, ...] = ()
    files: tuple[ServedFile, ...] = ()
    links: tuple[Link, ...] = field(default=())

    def served(self) -> list[Location]:
        """Return the locations that serve files to a consumer (``-`` marks a helper location)."""
        return [loc for loc in self.locations if loc.consumer != "-"]


def parse_serve(text: str, source: str = "bake.serve") -> Serve:
    """Parse ``bake.serve`` text with bake's own reader. Raises ServeError naming the line for
    anything unknown or malformed.

    Each location is listed with what it serves in the view a job's own container gets (the
    linked one): the consumer's files of view ``both``, and its links.
    """
    try:
        reading = servefile.read(text)
    except ValueError:
        raise ServeError(
            f"{source}: expected {SERVE_HEADER!r} on line 1, found {text.splitlines()[:1]!r}"
        ) from None
    if reading.refused:
        number, why = reading.refused[0]
        raise ServeError(f"{source}:{number}: expected {why}")
    records = reading.records
    roots = {r.consumer: r.root for r in records if isinstance(r, servefile.ServedSet)}
    locations = [
        Location(r.id, r.consumer, r.mode, r.var, r.sub, r.fallback)
        for r in records
        if isinstance(r, servefile.Loc)
    ]
    files, links = [], []
    for loc in locations:
        if loc.consumer not in roots:
            continue
        for r in records:
            if isinstance(r, servefile.File) and r.consumer == loc.consumer and r.view == "both":
                files.append(ServedFile(loc.id, f"{roots[loc.consumer]}/{r.name}", r.name, r.size))
            elif isinstance(r, servefile.Link) and r.consumer == loc.consumer:
                links.append(Link(loc.id, r.name, r.target))
    return Serve(tuple(locations), tuple(files), tuple(links))


def legacy_serve(assets: Iterable[dict]) -> Serve:
    """Return what an image sealed before ``bake.serve`` serves: the built-ins, for the lock's assets.

    Those images' entrypoint served exactly the built-ins of bake's consumer table.
    """
    files = [LockedFile(a["path"], int(a["size"]), a["sha256"]) for a in assets]
    return parse_serve(serve_text(BUILTINS, files), "the built-in consumers")

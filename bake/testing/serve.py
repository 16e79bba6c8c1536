"""Read ``bake.serve``, the consumer locations `bake seal` writes beside the lock, as data.

Format v1 (``bake.consumers.serve_text`` writes it): ``loc``, ``file`` and ``link`` records, one
per line, fields separated by one TAB. This reader checks an image's copy strictly, so a damaged
or newer file fails the location tests by name. Images sealed before that file existed carry
the built-in consumers only in their entrypoint; ``legacy_serve`` derives those from the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bake.consumers import BUILTINS, SERVE_HEADER, serve_text
from bake.index import LockedFile

FIELDS = {"loc": 7, "file": 6, "link": 4}


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
    """Parse ``bake.serve`` text. Raises ServeError naming the line for anything unknown or malformed."""
    lines = text.splitlines()
    if not lines or lines[0] != SERVE_HEADER:
        raise ServeError(f"{source}: expected {SERVE_HEADER!r} on line 1, found {lines[:1]!r}")
    locations, files, links = [], [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line or line.startswith("#"):
            continue
        kind, *values = line.split("\t")
        if kind not in FIELDS:
            raise ServeError(f"{source}:{number}: unknown record kind {kind!r}")
        if len(values) + 1 != FIELDS[kind]:
            raise ServeError(
                f"{source}:{number}: a {kind} record has {FIELDS[kind]} fields, found {len(values) + 1}"
            )
        if kind == "loc":
            locations.append(Location(*values))
        elif kind == "file":
            loc, asset, name, size, _lock = values
            if not size.isdigit():
                raise ServeError(f"{source}:{number}: size {size!r} is not a number")
            files.append(ServedFile(loc, asset, name, int(size)))
        else:
            links.append(Link(*values))
    known = {loc.id for loc in locations}
    for record in [*files, *links]:
        if record.loc not in known:
            raise ServeError(
                f"{source}: {record.name} is served at {record.loc!r}, which no loc record defines"
            )
    return Serve(tuple(locations), tuple(files), tuple(links))


def legacy_serve(assets: Iterable[dict]) -> Serve:
    """Return what an image sealed before ``bake.serve`` serves: the built-ins, for the lock's assets.

    Those images' entrypoint served exactly the built-ins of bake's consumer table.
    """
    files = [LockedFile(a["path"], int(a["size"]), a["sha256"]) for a in assets]
    return parse_serve(serve_text(BUILTINS, files), "the built-in consumers")

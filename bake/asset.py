"""The value every step passes along: one file to bake, where it goes, what it hashes to, where to get it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a value of the Hub's table, read by the engine only through its fields
    from bake.hub.entry import HubBlob


@dataclass(frozen=True)
class Asset:
    """One file to bake: where it goes, what it must hash to, where to get it."""

    name: str
    path: str
    sha256: str
    urls: tuple[str, ...]
    size: int | None = None
    groups: tuple[str, ...] = ()
    # For a [[hub]] blob: the repository files it backs (bake.hub.entry); not part of equality.
    hub: HubBlob | None = field(default=None, compare=False, repr=False)
    # The ``layer = "NAME"`` key: assets sharing it form one unit, one image layer (bake.layers).
    layer: str | None = None

    def canonical_url(self) -> str | None:
        """Return the first ``https://`` URL, the one consumers derive cache names from."""
        return next((u for u in self.urls if u.startswith("https://")), None)

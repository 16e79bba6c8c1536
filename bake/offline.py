"""``bake.offline`` v1: each baked consumer's own offline switch, for the entrypoint under ``BAKE_OFFLINE=1``.

``seal`` writes it beside ``bake.serve`` from the consumer table's ``offline`` field; the entrypoint
reads it only under ``BAKE_OFFLINE=1``, so an entrypoint older than it never opens it, and
``bake.serve`` v1 gains no record kind. The format is docs/SERVE_FORMAT.md's last section: the
header, then one ``CONSUMER VAR VALUE`` line (TAB-separated) per switch, where VALUE is a word
(``1``) or ``@PATH``, the directory PATH inside the asset root. The entrypoint exports a
consumer's switches only when every location of that consumer was served in this start.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bake import servefile

NAME = "bake.offline"
HEADER = "# bake offline v1"
_CONSUMER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"[A-Za-z0-9._-]+")
_AT_PATH = re.compile(r"@[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")


class HasSwitches(Protocol):
    """What the writer needs of a consumer (``bake.consumers.Consumer``)."""

    name: str
    offline: tuple[tuple[str, str], ...]

    def owns(self, path: str) -> bool: ...


@dataclass(frozen=True)
class Switch:
    """One offline switch: the variable a consumer's library reads, and its value."""

    consumer: str
    var: str
    value: str


def problem(switch: Switch) -> str | None:
    """The rule ``switch`` breaks, as the entrypoint words it, or None."""
    if not _CONSUMER.fullmatch(switch.consumer):
        return f"a CONSUMER name, saw {switch.consumer!r}"
    if not _VAR.fullmatch(switch.var) or servefile.refused_var(switch.var):
        return f"a variable name other than {servefile.REFUSED_TEXT}, saw {switch.var!r}"
    value = switch.value
    if not (_WORD.fullmatch(value) or (_AT_PATH.fullmatch(value) and servefile.plain(value[1:]))):
        return f"VALUE as a word of letters, digits, . _ - or @PATH inside the asset root, saw {value!r}"
    return None


def switches(consumers: Iterable[HasSwitches], paths: Sequence[str]) -> list[Switch]:
    """The switches of every consumer in ``consumers`` that owns one of the baked ``paths``, by name."""
    found = []
    for consumer in sorted(consumers, key=lambda c: c.name):
        if any(consumer.owns(p) for p in paths):
            found += [Switch(consumer.name, var, value) for var, value in consumer.offline]
    return found


def write(found: Iterable[Switch]) -> str:
    """Return the file's text. Raises ValueError for a switch that breaks a rule."""
    lines = [HEADER]
    for switch in found:
        if (why := problem(switch)) is not None:
            raise ValueError(f"{NAME}: expected {why}")
        lines.append("\t".join((switch.consumer, switch.var, switch.value)))
    return "\n".join(lines) + "\n"


def read(text: str) -> list[Switch]:
    """Parse the file's text. Raises ValueError naming the first line that breaks a rule."""
    lines = text.split("\n")
    if not lines or lines[0] != HEADER:
        raise ValueError(f"a {NAME} whose first line is '{HEADER}'")
    found = []
    for number, line in enumerate(lines[1:], start=2):
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(f"{NAME} line {number}: 3 tab-separated fields, saw {len(fields)}")
        switch = Switch(*fields)
        if (why := problem(switch)) is not None:
            raise ValueError(f"{NAME} line {number}: {why}")
        found.append(switch)
    return found

"""Byte units, defined once for buffer sizes and messages."""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40


def shown_size(n: int) -> str:
    """``n`` bytes as a reader wants them: ``64 MiB``, ``16 GiB``, else the exact count."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"

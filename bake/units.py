"""Byte units, defined once for buffer sizes and messages."""

from __future__ import annotations

MIB = 1 << 20

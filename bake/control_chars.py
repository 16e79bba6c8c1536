"""Untrusted text made safe to print: control characters shown as escapes, never acted on by a terminal."""

from __future__ import annotations

import re

# C0 controls (TAB and newline included), DEL and the C1 block: what a terminal or a
# line-based reader (SHA256SUMS, a log scraper) may act on instead of showing.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape_one(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1] if match.group() in "\t\n\r" else f"\\x{ord(match.group()):02x}"


def escape(text: str, *, keep_layout: bool = False) -> str:
    """Return ``text`` with every control character written as an escape (``\\n``, ``\\x1b``).

    ``keep_layout`` leaves line breaks and tabs alone, for a message bake laid out
    itself (a listing in ``--name-status`` form) whose untrusted parts were escaped
    where they were put in.
    """
    pattern = _CONTROL_BUT_LAYOUT if keep_layout else CONTROL
    return pattern.sub(_escape_one, text)


def has_control(text: str) -> bool:
    """Return True if ``text`` holds a control character (C0, DEL or C1)."""
    return CONTROL.search(text) is not None

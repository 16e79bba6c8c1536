"""bake/control_chars.py: untrusted text shown with its control characters escaped."""

from __future__ import annotations

import pytest

from bake.control_chars import escape, has_control


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text", "plain text"),
        ("a\nb", "a\\nb"),
        ("a\tb\rc", "a\\tb\\rc"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("del\x7f", "del\\x7f"),
        ("c1\x85\x9f", "c1\\x85\\x9f"),
        ("é ü \u2028", "é ü \u2028"),  # printable beyond Latin-1's controls is left alone
    ],
)
def test_escape_writes_every_control_character_as_an_escape(text: str, shown: str) -> None:
    assert escape(text) == shown


def test_keep_layout_leaves_tabs_and_line_breaks_and_escapes_the_rest() -> None:
    assert escape("a\tb\nc\x1b\x00", keep_layout=True) == "a\tb\nc\\x1b\\x00"


@pytest.mark.parametrize(
    ("text", "found"),
    [("", False), ("ok", False), ("a\nb", True), ("\x00", True), ("\x9f", True), ("\xa0", False)],
)
def test_has_control(text: str, found: bool) -> None:
    assert has_control(text) is found

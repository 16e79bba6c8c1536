"""Exact matching across ``bake/``: no pattern ends in ``$``, which also matches before a final newline.
(Round 5, issue 38: R5-7.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

BAKE_PACKAGE = Path(__file__).resolve().parents[2] / "bake"


def test_no_pattern_in_bake_ends_in_a_dollar() -> None:
    """``$`` also matches before a final newline; bake's patterns match whole values (fullmatch, ``\\Z``)."""
    found = []
    for path in sorted(BAKE_PACKAGE.rglob("*.py")):
        if "_vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = node if isinstance(node, ast.Call) else None
            if call is None or not isinstance(call.func, ast.Attribute) or not call.args:
                continue
            if call.func.attr in ("compile", "match", "fullmatch", "search") and isinstance(
                call.func.value, ast.Name
            ):
                first = call.args[0]
                text = ast.unparse(first)
                if call.func.value.id == "re" and text.rstrip("'\"").endswith("$"):
                    found.append(f"{path.relative_to(BAKE_PACKAGE)}:{call.lineno}: {text}")
    assert found == []

"""bake/tomlkeys.py: the first checks on a manifest entry (a table, with only the keys its kind allows)."""

from __future__ import annotations

import pytest

from bake.errors import ManifestError
from bake.tomlkeys import expect_mapping, refuse_unknown_keys, with_suggestion

ALLOWED = ("name", "path", "groups", "sha256")


def test_expect_mapping_returns_a_table_as_it_is() -> None:
    table = {"name": "x"}
    assert expect_mapping(table, "asset 1") is table


@pytest.mark.parametrize(("raw", "kind"), [("x", "str"), ([1], "list"), (3, "int")])
def test_expect_mapping_refuses_anything_else_naming_the_label_and_the_type(raw: object, kind: str) -> None:
    with pytest.raises(ManifestError, match=rf"^asset 1: expected a table, got {kind}$"):
        expect_mapping(raw, "asset 1")


def test_known_keys_pass() -> None:
    refuse_unknown_keys({"name": "x", "sha256": "0" * 64}, ALLOWED, "asset 'x'")


def test_unknown_keys_are_named_sorted_with_what_they_misspell() -> None:
    with pytest.raises(ManifestError) as caught:
        refuse_unknown_keys({"name": "x", "zzz": 1, "grops": []}, ALLOWED, "asset 'x'")
    assert str(caught.value) == (
        "asset 'x': unknown key(s) grops (did you mean groups?), zzz; "
        "allowed keys are groups, name, path, sha256"
    )


@pytest.mark.parametrize(
    ("key", "shown"),
    [("pth", "pth (did you mean path?)"), ("sha265", "sha265 (did you mean sha256?)"), (7, "7")],
)
def test_with_suggestion(key: object, shown: str) -> None:
    assert with_suggestion(key, ALLOWED) == shown

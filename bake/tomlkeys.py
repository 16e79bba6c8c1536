"""The first checks on any manifest entry: it is a TOML table, and it holds only the keys its kind allows."""

from __future__ import annotations

import difflib
from collections.abc import Collection

from bake.errors import ManifestError


def expect_mapping(raw: object, label: str) -> dict:
    """Return ``raw`` when it is a TOML table. Raises ManifestError naming ``label`` otherwise."""
    if not isinstance(raw, dict):
        raise ManifestError(f"{label}: expected a table, got {type(raw).__name__}")
    return raw


def refuse_unknown_keys(table: dict, allowed: Collection[str], where: str) -> None:
    """Raise ManifestError naming ``where`` and every key of ``table`` outside ``allowed``, each with the
    allowed key it most likely misspells (difflib, as git and pip suggest a command)."""
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        named = ", ".join(with_suggestion(key, allowed) for key in unknown)
        raise ManifestError(f"{where}: unknown key(s) {named}; allowed keys are {', '.join(sorted(allowed))}")


def with_suggestion(key: object, allowed: Collection[str]) -> str:
    """``key``, and the allowed key it most likely misspells: ``grops (did you mean groups?)``."""
    close = difflib.get_close_matches(str(key), list(allowed), n=1)
    return f"{key} (did you mean {close[0]}?)" if close else str(key)

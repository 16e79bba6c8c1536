"""The first checks on any manifest entry: it is a TOML table, and it holds only the keys its kind allows."""

from __future__ import annotations

from collections.abc import Collection

from bake.errors import ManifestError


def expect_mapping(raw: object, label: str) -> dict:
    """Return ``raw`` when it is a TOML table. Raises ManifestError naming ``label`` otherwise."""
    if not isinstance(raw, dict):
        raise ManifestError(f"{label}: expected a table, got {type(raw).__name__}")
    return raw


def refuse_unknown_keys(table: dict, allowed: Collection[str], where: str) -> None:
    """Raise ManifestError naming ``where`` and every key of ``table`` outside ``allowed``."""
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ManifestError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed keys are {', '.join(sorted(allowed))}"
        )

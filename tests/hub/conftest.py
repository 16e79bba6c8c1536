"""[[hub]] entries as manifest text, and what the table makes of them: shared by the Hub's tests."""

from __future__ import annotations

import json

from bake import consumers
from bake.hub import schema
from bake.manifest import parse_manifest

COMMIT = "a" * 40
SHA = "b" * 64
BLOB = "c" * 40


def entry(**overrides: str) -> str:
    base = {
        "repo": '"org/tiny"',
        "commit": f'"{COMMIT}"',
        "files": f'[{{path = "config.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]',
    }
    base.update(overrides)
    return "[[hub]]\n" + "".join(f"{k} = {v}\n" for k, v in base.items() if v is not None)


def rec(path: str = "a", size: int = 1, sha256: str = SHA, blob: str = BLOB, **more: object) -> str:
    """One file record as TOML text (strings through json.dumps, which TOML reads the same)."""
    fields = {"path": path, "size": size, "sha256": sha256, "blob": blob, **more}
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in fields.items()) + "}"


def files(*records: str) -> str:
    return "[" + ", ".join(records) + "]"


def serve_records(assets: list) -> list:
    """The bake.serve records of the Hub entries ``assets`` hold whole (the Hub's entry of the table)."""
    return consumers.Hub(schema.selected_entries(assets)).serve_records([], {})


def entries_of(text: str) -> list[schema.HubEntry]:
    return schema.selected_entries(parse_manifest(text, allow_http=True))

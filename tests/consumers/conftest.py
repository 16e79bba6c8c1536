"""Declared consumers (nltk, whisper) and their baked files, shared by the consumer table's tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake import consumers, index
from bake.locations import parse_location

NLTK = consumers.Consumer("nltk", [parse_location("$NLTK_DATA", "")])
WHISPER = consumers.Consumer("whisper", [parse_location("${XDG_CACHE_HOME:-$HOME/.cache}/whisper", "")])


@pytest.fixture
def declared(tmp_path: Path) -> tuple[Path, list[index.LockedFile]]:
    root = tmp_path / "assets"
    files = {"nltk/corpora/stopwords/english": b"a\nthe\n", "whisper/base.pt": b"weights"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root, [index.LockedFile(r, len(d), hashlib.sha256(d).hexdigest()) for r, d in files.items()]

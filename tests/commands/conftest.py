"""Shared by the command tests: two files served by file:// URLs and the manifest naming them, and one
manifest that declares a consumer."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.runners import bake


@pytest.fixture
def source(tmp_path: Path) -> dict:
    """Two files served by file:// URLs and a manifest naming them."""
    src = tmp_path / "src"
    src.mkdir()
    files = {"one": b"first asset\n" * 100, "two": os.urandom(50_000)}
    tables = []
    for name, data in files.items():
        (src / name).write_bytes(data)
        tables.append(
            f'[[asset]]\nname = "{name}"\npath = "data/{name}.bin"\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n'
            f'urls = ["{(src / name).as_uri()}"]\ngroups = ["{name}"]\n'
        )
    manifest = tmp_path / "assets.toml"
    manifest.write_text("\n".join(tables))
    return {"manifest": manifest, "files": files, "src": src, "tmp": tmp_path}


def fetch(source: dict, *extra: str) -> subprocess.CompletedProcess:
    return bake(
        "fetch",
        "--manifest",
        str(source["manifest"]),
        "--dest",
        str(source["tmp"] / "dest"),
        "--cache-dir",
        str(source["tmp"] / "cache"),
        "--timeout",
        "5",
        *extra,
    )


DECLARED = """\
[[consumer]]
name = "whisper"
locations = ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]

[[asset]]
name = "base"
path = "whisper/base.pt"
sha256 = "%s"
urls = ["https://example.org/base.pt"]
""" % ("0" * 64)

"""Hostile digests against ``bake/add``: ``--sha256 sha256:HEX`` is taken and written bare.

(Round 5, issue 38: R5-7.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import bake, blob, sha256

pytestmark = pytest.mark.timeout(180)


def test_add_takes_sha256_with_its_prefix_and_writes_it_bare(mirror: Mirror, tmp_path: Path) -> None:
    data = blob(1000, "add-prefixed")
    mirror.add("/data/p.bin", data)
    manifest = tmp_path / "assets.toml"
    proc = bake(
        "add", mirror.url("/data/p.bin"), "--path", "data/p.bin", "--manifest", manifest,
        "--sha256", f"sha256:{sha256(data)}", "--cache-dir", tmp_path / "cache", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f'sha256 = "{sha256(data)}"' in manifest.read_text() and "sha256:" not in manifest.read_text()

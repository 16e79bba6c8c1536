"""A fetch that fails leaves ``--dest`` as it found it: no new empty directory, nor ``--dest`` itself.

(Assets that do verify are still installed when others fail, as the contract says.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mirror import Mirror, http_error

from . import KIB, asset_entry, bake, blob, manifest_text

GONE = blob(64 * KIB, "failed-fetch-gone")


def tree(root: Path) -> list[str] | None:
    """Every entry under ``root``, directories included; None when ``root`` does not exist."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else None


@pytest.mark.parametrize("dest_exists", [True, False], ids=["dest-exists", "no-dest-yet"])
def test_a_failed_fetch_leaves_dest_as_it_was(tmp_path: Path, clean_net_env: None, dest_exists: bool) -> None:
    dest = tmp_path / "dest"
    if dest_exists:
        (dest / "kept").mkdir(parents=True)
        (dest / "kept" / "file").write_text("mine")
    before = tree(dest)
    with Mirror({"/gone.bin": GONE}) as m:
        m.script("/gone.bin", *[http_error(404)] * 3)
        manifest = tmp_path / "assets.toml"
        manifest.write_text(
            manifest_text([asset_entry("gone", "deep/er/gone.bin", GONE, m.url("/gone.bin"))])
        )
        proc = bake("fetch", "--manifest", manifest, "--dest", dest, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 3, proc.stderr
    assert tree(dest) == before

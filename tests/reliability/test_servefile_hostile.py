"""Hostile locations against ``bake/servefile.py``'s limits, found by the manifest check before any
record is written. (Round 4, issue 29: finding 6.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from bake import cli
from tests.baked import write_manifest

pytestmark = pytest.mark.timeout(120)


# ---- finding 6: the serve format's limits in the manifest check -------------------------------


def test_a_location_longer_than_bake_serve_allows_is_a_manifest_error(tmp_path: Path, capsys) -> None:
    long_default = "/" + "/".join(["d" * 200] * 6)  # every component plain, the field over 1024 bytes
    manifest = write_manifest(tmp_path / "assets.toml")
    manifest.write_text(
        manifest.read_text()
        + f'[[consumer]]\nname = "long"\nlocations = ["${{LONG_CACHE:-{long_default}}}/x"]\n'
    )
    assert cli.main(["manifest", "check", "--manifest", str(manifest)]) == 2
    assert "consumer 'long'" in capsys.readouterr().err

"""``bake seal`` after ``bake fetch``: the installed files made read-only (bake/commands/seal.py)."""

from __future__ import annotations

from tests.commands.conftest import fetch
from tests.runners import bake


def test_seal_after_fetch(source: dict) -> None:
    assert fetch(source).returncode == 0
    dest = source["tmp"] / "dest"
    assert bake("seal", "--manifest", str(source["manifest"]), "--dest", str(dest)).returncode == 0
    assert oct((dest / "data/one.bin").stat().st_mode & 0o777) == "0o444"
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755)

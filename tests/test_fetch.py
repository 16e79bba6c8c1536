"""`bake fetch` as a whole: every asset that can be fetched lands even when others fail, and no Hub code loads
without a Hub asset. Each module's own tests are in tests/fetch/."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake.fetch import FetchFailed, fetch_assets
from tests.fetch.conftest import KIB, REPO, blob, files_under, make_asset, opts
from tests.mirror import Mirror, wrong_bytes


def test_fetch_without_a_hub_asset_loads_no_hub_code(mirror: Mirror, tmp_path: Path) -> None:
    """`bake fetch` goes straight to the engine: no Hub downloader, no Hub adding, no huggingface_hub.

    (bake.hub's values, schema and layout come in with the consumer table; none of them runs.)
    """
    data = blob(10 * KIB)
    mirror.add("/f.bin", data)
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        f'[[asset]]\nname = "a"\npath = "d/a.bin"\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        f'urls = ["{mirror.url("/f.bin")}"]\n'
    )
    code = (
        "import sys; from bake import cli\n"
        f"assert cli.main(['fetch', '--manifest', {str(manifest)!r}, '--dest', {str(tmp_path / 'd')!r}, "
        f"'--cache-dir', {str(tmp_path / 'c')!r}, '-q']) == 0\n"
        "hub = ('bake.add.hub_repo', 'bake.add.hub_api', 'bake.fetch.hub_download',"
        " 'huggingface_hub', 'httpx2')\n"
        "print(sorted(m for m in sys.modules if m.startswith(hub)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"  # after fetch's result line


def test_dest_holds_only_verified_files_after_failures(mirror: Mirror, tmp_path: Path) -> None:
    good, bad, gone = blob(40 * KIB, b"g"), blob(40 * KIB, b"b"), blob(40 * KIB, b"x")
    mirror.add("/good", good)
    mirror.add("/bad", bad)
    mirror.script("/bad", wrong_bytes())
    assets = [
        make_asset(good, mirror.url("/good"), name="good", path="a/good.bin"),
        make_asset(bad, mirror.url("/bad"), name="bad", path="a/bad.bin"),
        make_asset(gone, mirror.url("/gone"), name="gone", path="b/gone.bin"),
    ]
    with pytest.raises(FetchFailed) as info:
        fetch_assets(assets, tmp_path / "dest", opts(tmp_path))
    assert set(info.value.failures) == {"bad", "gone"}
    assert [r.name for r in info.value.records] == ["good"]
    assert "2 of 3 asset(s)" in str(info.value)
    assert files_under(tmp_path / "dest") == ["a/good.bin"]

"""Hostile values against ``bake/manifest.py``: hex, commits and names are matched whole.

A trailing newline is refused; ``sha256:HEX`` is accepted wherever a sha256 is, and written as
bare hex. (Round 5, issue 38: R5-7.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import asset_entry, bake, blob, manifest_text, sha256
from .tiny_hub import BLOB, COMMIT, hub_entry

pytestmark = pytest.mark.timeout(180)

HEX = sha256(b"vocab")


TRAILING_NEWLINE = {
    "asset sha256": manifest_text(
        [{"name": "v", "path": "data/v", "sha256": HEX + "\n", "urls": ["https://example.org/v"]}]
    ),
    "hub commit": hub_entry(commit=COMMIT + "\n"),
    "hub file sha256": hub_entry(sha256=sha256(b"abc") + "\n"),
    "hub file blob": hub_entry(blob=BLOB + "\n"),
    "asset name": manifest_text(
        [{"name": "v\n", "path": "data/v", "sha256": HEX, "urls": ["https://x.org/v"]}]
    ),
    "consumer name": '[[consumer]]\nname = "w\\n"\nlocations = ["$W_CACHE"]\n'
    + manifest_text([{"name": "v", "path": "data/v", "sha256": HEX, "urls": ["https://example.org/v"]}]),
}


@pytest.mark.parametrize("text", TRAILING_NEWLINE.values(), ids=TRAILING_NEWLINE.keys())
def test_a_value_with_a_trailing_newline_is_refused(tmp_path: Path, text: str) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(text)
    for command in (["manifest", "check"], ["manifest", "digest"]):
        proc = bake(*command, "--manifest", manifest, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (command, proc.stderr)


def test_sha256_with_its_prefix_is_accepted_and_written_bare(tmp_path: Path) -> None:
    data = blob(100, "prefixed")
    bare = manifest_text([asset_entry("p", "data/p.bin", data, "https://example.org/p")])
    prefixed = bare.replace(f'"{sha256(data)}"', f'"sha256:{sha256(data).upper()}"')
    assert prefixed != bare
    digests = []
    for text in (bare, prefixed, hub_entry(sha256="sha256:" + sha256(b"abc"))):
        manifest = tmp_path / "assets.toml"
        manifest.write_text(text)
        proc = bake("manifest", "digest", "--manifest", manifest, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        digests.append(proc.stdout)
    assert digests[0] == digests[1]
    shown = bake("manifest", "--manifest", tmp_path / "assets.toml", cwd=tmp_path)
    assert f'"sha256": "{sha256(b"abc")}"' in shown.stdout

"""Hostile values against ``bake/manifest.py``: hex, commits and names are matched whole.

A trailing newline is refused; ``sha256:HEX`` is accepted wherever a sha256 is, and written as
bare hex. (Round 5, issue 38: R5-7.) A newcomer's manifests: a misspelt consumer prefix is named, a
``file:`` URL a build would misread is refused, a BOM reads, and ``BAKE_MANIFEST`` names the manifest
(issue 28).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import asset_entry, bake, blob, manifest_text, sha256
from .newcomer import DATA, assert_one_clean_error, write_manifest
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


# -- a newcomer's manifests (issue 28 findings 5, 9 and 10) ------------------------------------------


def test_a_typo_in_a_consumer_prefix_is_named(tmp_path: Path, source: Path) -> None:
    target = write_manifest(tmp_path, source.as_uri(), "tiktokn/o200k_base.tiktoken")
    proc = bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("tiktokn/") == 1 and "did you mean 'tiktoken/'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("url", ["file:../x.bin", "file:x.bin", "file://build-host/srv/x.bin"])
def test_a_file_url_a_build_would_misread_is_refused(tmp_path: Path, url: str) -> None:
    proc = bake("manifest", "--manifest", write_manifest(tmp_path, url))
    errors = assert_one_clean_error(proc, 2)
    assert url in errors and "file:///" in errors, errors


def test_a_sha256_prefix_is_taken_and_shown_bare(tmp_path: Path) -> None:
    # Round 5 accepts the prefix pip and Docker write (it was refused, "drop the prefix", before).
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([{"name": "m", "path": "d/m", "sha256": "sha256:" + sha256(DATA),
                                      "urls": ["file:///x"]}]))  # fmt: skip
    proc = bake("manifest", "--manifest", target)
    assert proc.returncode == 0, proc.stderr
    assert f'"sha256": "{sha256(DATA)}"' in proc.stdout and "sha256:" not in proc.stdout


def test_a_manifest_with_a_bom_reads(tmp_path: Path, source: Path) -> None:
    target = write_manifest(tmp_path, source.as_uri())
    target.write_bytes(b"\xef\xbb\xbf" + target.read_bytes())
    proc = bake("manifest", "digest", "--manifest", target)
    assert proc.returncode == 0, proc.stderr


def test_bake_manifest_names_the_manifest_and_the_option_wins(tmp_path: Path, source: Path) -> None:
    named = write_manifest(tmp_path, source.as_uri())
    proc = bake("manifest", "digest", cwd=tmp_path, env={"BAKE_MANIFEST": str(named)})
    assert proc.returncode == 0, proc.stderr
    proc = bake("manifest", "digest", "--manifest", tmp_path / "other.toml", cwd=tmp_path,
                env={"BAKE_MANIFEST": str(named)})  # fmt: skip
    assert proc.returncode == 2 and "other.toml" in proc.stderr, proc.stderr
    proc = bake("fetch", "--dest", tmp_path / "d", cwd=tmp_path, env={"BAKE_MANIFEST": "absent.toml"})
    errors = assert_one_clean_error(proc, 2)
    assert "absent.toml" in errors and "BAKE_MANIFEST" in errors, errors

"""Hostile input against ``bake/add``.

``--sha256 sha256:HEX`` is taken and written bare (round 5, issue 38: R5-7); a newcomer's first
``bake add`` starts a manifest, checks its directory before it downloads, refuses a FIFO and writes
no query credential (issue 28, issue 29 findings 10 and 11).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bake import manifest
from tests.mirror import Mirror

from . import KIB, bake, blob, manifest_text, sha256
from .newcomer import DATA, add, assert_one_clean_error

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


# -- a newcomer's first `bake add` (issue 28 findings 1, 2 and 4; issue 29 findings 10 and 11) -------


@pytest.mark.parametrize("start", ["missing", "empty", "comments only"])
def test_add_starts_a_manifest(tmp_path: Path, source: Path, start: str) -> None:
    target = tmp_path / "assets.toml"
    if start == "empty":
        target.write_text("")
    elif start == "comments only":
        target.write_text("# the assets of our CI\n")
    proc = add(target, source.as_uri(), tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    (asset,) = manifest.load_manifest(target)
    assert (asset.path, asset.sha256, asset.size) == ("data/model.bin", sha256(DATA), len(DATA))
    if start == "comments only":
        assert target.read_text().startswith("# the assets of our CI\n")


def test_add_into_a_read_only_directory_is_one_clean_error(tmpfs, tmp_path: Path, source: Path) -> None:
    where = tmpfs("ro", 1024 * KIB)
    target = where / "assets.toml"
    target.write_text(manifest_text([{"name": "a", "path": "data/a", "sha256": "0" * 64,
                                      "urls": ["file:///nowhere"]}]))  # fmt: skip
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    proc = add(target, source.as_uri(), tmp_path / "cache")
    errors = assert_one_clean_error(proc, 2)
    assert str(target) in errors and "read-only" in errors.lower(), errors


def test_add_checks_the_manifest_directory_before_it_downloads(
    tmpfs, tmp_path: Path, clean_net_env: None
) -> None:
    """Issue 37: the directory was found read-only only after the download."""
    where = tmpfs("ro", 1024 * KIB, "ro")
    with Mirror({"/m.bin": DATA}) as served:
        for target in (where / "assets.toml", tmp_path / "no-such-dir" / "assets.toml"):
            proc = add(target, served.url("/m.bin"), tmp_path / "cache")
            errors = assert_one_clean_error(proc, 2)
            assert str(target.parent) in errors and "nothing was fetched" in errors, errors
        assert served.requests["/m.bin"] == 0, "the file was downloaded before the manifest was checked"


def test_errors_from_add_point_at_no_manifest_entry(tmp_path: Path, clean_net_env: None) -> None:
    with Mirror({}) as served:
        proc = add(tmp_path / "assets.toml", served.url("/missing.bin"), tmp_path / "cache")
    errors = assert_one_clean_error(proc, 3)
    assert "in the manifest" not in errors and "this sha256" not in errors, errors
    assert "URL" in errors, errors


def test_add_refuses_a_fifo_as_the_manifest_and_never_blocks(tmp_path: Path, source: Path) -> None:
    fifo = tmp_path / "assets.toml"
    os.mkfifo(fifo)
    proc = bake("add", source.as_uri(), "--path", "data/model.bin", "--manifest", fifo, "--cache-dir",
                tmp_path / "cache", timeout=20)  # fmt: skip
    errors = assert_one_clean_error(proc, 2)
    assert "regular file" in errors and str(fifo) in errors, errors


@pytest.mark.parametrize("param", ["token", "access_token", "X-Amz-Signature", "sig"])
def test_add_writes_no_query_credentials(tmp_path: Path, clean_net_env: None, param: str) -> None:
    with Mirror({"/m.bin": DATA}) as served:
        url = served.url("/m.bin") + f"?{param}=s3cret-T0ken&rev=2"
        target = tmp_path / "assets.toml"
        proc = add(target, url, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "s3cret" not in target.read_text()
    assert "s3cret" not in proc.stdout + proc.stderr
    assert manifest.load_manifest(target)[0].urls == (served.url("/m.bin") + "?rev=2",)
    assert "--mirror" in proc.stderr and "bake_mirrors" in proc.stderr, proc.stderr

"""Integrity holes in ``--dest`` against ``bake seal`` and ``bake verify``, and doctor on what was never
sealed. (Issue 28, findings 5 and 6.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import bake
from .newcomer import DATA, assert_one_clean_error, fetched

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("command", ["verify", "seal"])
def test_a_link_out_of_dest_fails_verify_and_seal(tmp_path: Path, source: Path, command: str) -> None:
    target, dest = fetched(tmp_path, source)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(DATA)
    (dest / "data/model.bin").unlink()
    (dest / "data/model.bin").symlink_to(outside)
    proc = bake(command, "--manifest", target, "--dest", dest)
    errors = assert_one_clean_error(proc, 3)
    assert "data/model.bin" in errors and "link" in errors, errors


def test_seal_refuses_stray_files_and_removes_them_when_asked(tmp_path: Path, source: Path) -> None:
    target, dest = fetched(tmp_path, source)
    (dest / "data/old.bin").write_bytes(b"an entry since removed from the manifest")
    proc = bake("seal", "--manifest", target, "--dest", dest)
    errors = assert_one_clean_error(proc, 2)
    assert "data/old.bin" in errors and "--remove-stray" in errors, errors
    assert (dest / "data/old.bin").exists()
    proc = bake("seal", "--manifest", target, "--dest", dest, "--remove-stray")
    assert proc.returncode == 0, proc.stderr
    assert not (dest / "data/old.bin").exists() and (dest / "data/model.bin").exists()


def test_seal_says_what_it_did(tmp_path: Path, source: Path) -> None:
    target, dest = fetched(tmp_path, source)
    proc = bake("seal", "--manifest", target, "--dest", dest)
    assert proc.returncode == 0 and "sealed" in proc.stdout, (proc.stdout, proc.stderr)


def test_doctor_on_an_unsealed_directory_is_no_pass(tmp_path: Path, source: Path) -> None:
    _, dest = fetched(tmp_path, source)
    proc = bake("doctor", "--assets", dest)
    errors = assert_one_clean_error(proc, 3)
    assert "bake seal" in errors, errors

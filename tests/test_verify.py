"""bake.verify: every file present, regular, of its size and SHA-256."""

from __future__ import annotations

from pathlib import Path

import pytest

from bake import index, verify
from bake.errors import VerifyError
from tests.baked import SMALL_FILES as FILES
from tests.baked import make_dest


def test_verify_passes_on_good_files(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    verify.verify_dest(dest, index.expected_files(assets))


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        pytest.param(lambda p: p.unlink(), "found missing", id="missing"),
        pytest.param(lambda p: p.write_bytes(b"model bytez"), "expected sha256", id="tampered"),
        pytest.param(lambda p: (p.unlink(), p.mkdir()), "not a regular file", id="directory"),
    ],
)
def test_verify_names_each_problem(tmp_path: Path, damage, needle: str) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    damage(dest / "s3tokenizer/m.onnx")
    with pytest.raises(VerifyError) as err:
        verify.verify_dest(dest, index.expected_files(assets))
    assert "s3tokenizer/m.onnx" in str(err.value)
    assert needle in str(err.value)
    assert err.value.exit_code == 3


def test_verify_checks_size_before_hashing(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    sized = [index.LockedFile(a.path, 999, a.sha256) for a in assets]
    with pytest.raises(VerifyError, match="expected 999 bytes"):
        verify.verify_dest(dest, sized)

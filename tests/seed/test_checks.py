"""bake.seed.checks: BAKE_VERIFY=1's hashing, and the messages of SHA256SUMS's one reader it relays."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake import index
from bake.seed import checks
from tests.seed.conftest import FILES


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a" * 64 + "  x\r\n", "line 1 ends with a carriage return (CRLF line endings): expected LF line "
         "endings, as bake writes them"),
        ("a" * 64 + "  x\n" + "b" * 63 + "  y\n",
         "line 2 is not '<sha256>  <path>': expected the format bake writes"),
        ("a" * 64 + "  ../x\n", "line 1 names '../x', outside DEST: expected a relative path inside it"),
        ("a" * 64 + "  /etc/passwd\n",
         "line 1 names '/etc/passwd', outside DEST: expected a relative path inside it"),
        ("", "holds no checksum line: expected one per baked file"),
    ],
)  # fmt: skip
def test_read_sums_names_the_first_line_sha256sum_could_not_check(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "SHA256SUMS").write_text(text, newline="")
    with pytest.raises(ValueError) as caught:
        index.read_sums(tmp_path)
    assert str(caught.value) == problem.replace("DEST", str(tmp_path))


def test_asset_problems_name_each_file_that_does_not_hash_as_baked(assets: Path) -> None:
    assert checks.asset_problems(assets) == []
    tampered = assets / "nltk" / "tokenizers" / "punkt.zip"
    tampered.parent.chmod(0o755)
    tampered.chmod(0o644)
    tampered.write_bytes(bytes(700))
    good = hashlib.sha256(FILES["nltk/tokenizers/punkt.zip"]).hexdigest()

    assert checks.asset_problems(assets) == [
        f"BAKE_VERIFY=1: {tampered}: expected sha256 {good} (SHA256SUMS), saw sha256 "
        f"{hashlib.sha256(bytes(700)).hexdigest()}; the image's asset layer is damaged: pull the image again "
        "or rebuild it; job not started"
    ]

"""bake.seed.copier: copies hashed as they are written, and installed by links that never replace."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake.seed import copier, seeder
from tests.seed.conftest import FILES, nltk_files, request


def test_a_copy_that_does_not_hash_as_baked_is_never_installed(assets: Path, tmp_path: Path) -> None:
    tampered = assets / "nltk" / "tokenizers" / "punkt.zip"
    tampered.parent.chmod(0o755)
    tampered.chmod(0o644)
    tampered.write_bytes(bytes(700))
    loc = tmp_path / "node"
    loc.mkdir()

    outcome = seeder.seed(request(assets, loc))

    assert (outcome.kind, outcome.code) == (seeder.LEFT, 3)
    good = hashlib.sha256(FILES["nltk/tokenizers/punkt.zip"]).hexdigest()
    assert (
        f"a copy of tokenizers/punkt.zip hashed sha256 {hashlib.sha256(bytes(700)).hexdigest()}"
        in outcome.text
    )
    assert f"expected {good}" in outcome.text
    assert nltk_files(loc) == {} and not list((loc / ".bake").glob("partial.*"))


def test_a_file_missing_from_the_image_is_named(assets: Path, tmp_path: Path) -> None:
    gone = assets / "nltk" / "tokenizers" / "punkt.zip"
    gone.parent.chmod(0o755)
    gone.unlink()
    loc = tmp_path / "node"
    loc.mkdir()

    outcome = seeder.seed(request(assets, loc))

    assert (outcome.kind, outcome.code) == (seeder.LEFT, 6)
    assert outcome.text == f"the image lacks {gone}, which bake.serve names: rebuild the image"


def test_a_name_filled_during_the_copy_is_proved_by_its_hash(
    assets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another copier (its lock did not exclude) installs a file while this one copies: this one's
    # link finds the name taken, hashes what is there, and counts it served; an impostor, not.
    loc = tmp_path / "node"
    loc.mkdir()
    real = copier._copy_one

    def beside(source, record, partial, name, beat):
        target = loc / record.name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = FILES[f"nltk/{record.name}"]
        target.write_bytes(data if record.name.startswith("corpora") else bytes(len(data)))
        return real(source, record, partial, name, beat)

    monkeypatch.setattr(copier, "_copy_one", beside)
    outcome = seeder.seed(request(assets, loc))

    assert outcome.kind == seeder.MOVED
    assert outcome.text.startswith(
        "node storage where tokenizers/punkt.zip is a same-size file that hashes sha256"
    )
    assert (loc / "corpora" / "tiny" / "words.txt").read_bytes() == FILES["nltk/corpora/tiny/words.txt"]
    assert not list((loc / ".bake").glob("partial.*"))

"""bake.seed.seeder: who copies, what a location left as is or moved says, and the wait's bound."""

from __future__ import annotations

from pathlib import Path

from bake.seed import liveness, plan, seeder
from tests.seed.conftest import FILES, nltk_files, request


def test_a_first_seeding_copies_verified_files_stamps_and_a_second_finds_them(
    assets: Path, tmp_path: Path
) -> None:
    loc = tmp_path / "node"
    loc.mkdir()
    (loc / "theirs.bin").write_bytes(b"node data")

    outcome = seeder.seed(request(assets, loc))

    assert outcome == seeder.Outcome(seeder.SERVED, f"copied 2 file(s), 1600 bytes, into {loc}")
    assert nltk_files(loc) == {n.split("/", 1)[1]: d for n, d in FILES.items() if n.startswith("nltk/")}
    assert all((loc / n).stat().st_nlink == 1 for n in ("corpora/tiny/words.txt", "tokenizers/punkt.zip"))
    assert sorted(p.name for p in (loc / ".bake").iterdir()) == [
        "lock", f"served.{plan.load(assets, 'nltk').set.digest}.copied",
    ]  # fmt: skip
    assert seeder.seed(request(assets, loc)) == seeder.Outcome(seeder.SERVED, "")


def test_a_name_holding_something_else_is_never_changed_and_the_rest_is_copied(
    assets: Path, tmp_path: Path
) -> None:
    loc = tmp_path / "node"
    (loc / "corpora" / "tiny").mkdir(parents=True)
    (loc / "corpora" / "tiny" / "words.txt").write_bytes(b"truncated")

    outcome = seeder.seed(request(assets, loc))

    assert outcome.kind == seeder.MOVED and outcome.code == 6 and not outcome.planted
    assert (
        outcome.text
        == "node storage where corpora/tiny/words.txt is 9 bytes, not the baked 900, and nothing there is "
        "changed"
    )
    assert (loc / "corpora" / "tiny" / "words.txt").read_bytes() == b"truncated"
    assert (loc / "tokenizers" / "punkt.zip").read_bytes() == FILES["nltk/tokenizers/punkt.zip"]


def test_a_link_planted_at_bakes_state_is_named_and_never_followed(assets: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    loc = tmp_path / "node"
    loc.mkdir()
    (loc / ".bake").symlink_to(victim)

    outcome = seeder.seed(request(assets, loc))

    assert (outcome.kind, outcome.code, outcome.planted) == (seeder.MOVED, 6, True)
    assert (
        outcome.text
        == f"node storage where {loc}/.bake is a symbolic link, which is never followed or opened"
    )
    assert list(victim.iterdir()) == []


def test_without_copying_node_storage_is_left_as_is(assets: Path, tmp_path: Path) -> None:
    loc = tmp_path / "node"
    loc.mkdir()

    outcome = seeder.seed(request(assets, loc, copy=False))

    assert outcome == seeder.Outcome(
        seeder.LEFT, "node storage, left as is under BAKE_SEED=0 (corpora/tiny/words.txt: nothing there)", 6
    )
    assert list(loc.iterdir()) == []


def test_the_bound_is_the_stale_bound_a_margin_and_the_bytes_left_at_the_floor_rate() -> None:
    assert seeder.bound(0) == liveness.STALE_S + seeder.MARGIN_S == 40
    assert seeder.bound(32 * 1024 * 1024 * 30) == 70

"""bake.seed.plan: a consumer's records from bake.serve, and what a location holds against them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bake.errors import UsageError
from bake.seed import plan
from tests.seed.conftest import FILES

WORDS, PUNKT = "corpora/tiny/words.txt", "tokenizers/punkt.zip"


def looked(loc: Path, records: plan.Records) -> plan.Look:
    fd = os.open(loc, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return plan.look(fd, str(loc), records.files)
    finally:
        os.close(fd)


def test_load_gives_the_consumers_own_records_and_the_names_at_its_top(assets: Path) -> None:
    records = plan.load(assets, "nltk")

    assert (records.set.consumer, records.set.state, records.set.root) == ("nltk", ".bake", "nltk")
    assert records.dirs == (".", "corpora", "corpora/tiny", "tokenizers")
    assert [(f.name, f.size) for f in records.files] == [(WORDS, 900), (PUNKT, 700)]
    assert records.links == () and records.refused == () and records.damaged == ""
    assert records.linked() == records.files
    assert records.top_names() == {"corpora", "tokenizers", ".bake"}


@pytest.mark.parametrize(
    ("serve", "consumer", "message"),
    [
        (None, "nltk", "cannot read it"),
        ("# bake serve v9\n", "nltk", "expected a bake.serve whose first line is '# bake serve v1'"),
        ("", "nobody", "expected a set record for the consumer 'nobody', saw none"),
    ],
    ids=["no bake.serve", "not v1", "a consumer it lacks"],
)
def test_load_refuses_what_it_cannot_serve_as_a_usage_error(
    assets: Path, serve: str | None, consumer: str, message: str
) -> None:
    path = assets / "bake.serve"
    assets.chmod(0o755)
    if serve is None:
        path.unlink()
    elif serve:
        path.chmod(0o644)
        path.write_text(serve)

    with pytest.raises(UsageError) as caught:
        plan.load(assets, consumer)

    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_a_refused_file_line_is_reported_to_all_and_damages_only_its_consumer(assets: Path) -> None:
    path = assets / "bake.serve"
    assets.chmod(0o755)
    path.chmod(0o644)
    number = len(path.read_text().splitlines()) + 1
    with path.open("a") as serve:
        serve.write(f"file\tnltk\tboth\t../x\t1\t{'a' * 64}\n")

    nltk, tiktoken = plan.load(assets, "nltk"), plan.load(assets, "tiktoken")

    why = "NAME as a path inside the location, saw '../x'"
    assert nltk.refused == tiktoken.refused == ((number, why),)
    assert nltk.damaged == f"{path} line {number}: expected {why}"
    assert tiktoken.damaged == ""
    assert [f.name for f in nltk.files] == [WORDS, PUNKT]


def test_look_counts_what_is_missing_and_names_what_is_there_instead(assets: Path, tmp_path: Path) -> None:
    records = plan.load(assets, "nltk")
    loc = tmp_path / "node"
    loc.mkdir()

    first = looked(loc, records)
    assert ([r.name for r in first.missing], first.problems, first.bytes_missing) == (
        [WORDS, PUNKT],
        [],
        1600,
    )

    (loc / "corpora" / "tiny").mkdir(parents=True)
    (loc / WORDS).write_bytes(FILES[f"nltk/{WORDS}"])
    (loc / "tokenizers").mkdir()
    (loc / PUNKT).symlink_to(loc / WORDS)
    second = looked(loc, records)
    assert second.missing == [] and second.problems == [(PUNKT, "a symbolic link, not a regular file")]

    (loc / PUNKT).unlink()
    (loc / PUNKT).write_bytes(b"short")
    assert looked(loc, records).problems == [(PUNKT, "5 bytes, not the baked 700")]


def test_look_never_walks_through_a_linked_directory(assets: Path, tmp_path: Path) -> None:
    records = plan.load(assets, "nltk")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "tiny").mkdir(parents=True)
    (elsewhere / "tiny" / "words.txt").write_bytes(FILES[f"nltk/{WORDS}"])
    loc = tmp_path / "node"
    loc.mkdir()
    (loc / "corpora").symlink_to(elsewhere)

    found = looked(loc, records)

    assert found.problems == [(WORDS, f"under {loc}/corpora is a symbolic link")]
    assert [r.name for r in found.missing] == [PUNKT]


def test_look_linked_follows_each_link_to_a_file_of_the_baked_size(assets: Path, tmp_path: Path) -> None:
    records = plan.load(assets, "nltk")
    view = tmp_path / "view"
    (view / "corpora" / "tiny").mkdir(parents=True)
    (view / "tokenizers").mkdir()
    (view / WORDS).symlink_to(assets / "nltk" / WORDS)
    (view / PUNKT).symlink_to(assets / "nltk" / PUNKT)
    assert plan.look_linked(str(view), records) == []

    (view / PUNKT).unlink()
    (view / PUNKT).symlink_to(assets / "nltk" / WORDS)
    (view / WORDS).unlink()
    (view / WORDS).symlink_to(tmp_path / "gone")
    assert plan.look_linked(str(view), records) == [
        (WORDS, "nothing there, or a link to nothing"),
        (PUNKT, "900 bytes, not the baked 700"),
    ]

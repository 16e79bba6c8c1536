"""bake.hub.entry: a pinned repository's names, in huggingface_hub's cache and in bake's messages."""

from __future__ import annotations

import pytest

from bake.hub.entry import HubBlob, HubEntry, HubFile, blob_path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SMALL = HubFile("config.json", 3, "b" * 64, "c" * 40)
LARGE = HubFile("model.safetensors", 9, "d" * 64, "e" * 40, lfs=True)


def entry(kind: str = "model", **more: object) -> HubEntry:
    return HubEntry("org/tiny", kind, COMMIT, (SMALL, LARGE), **more)


def test_a_files_etag_is_its_blob_id_or_for_lfs_its_sha256() -> None:
    assert (SMALL.etag, LARGE.etag) == ("c" * 40, "d" * 64)


@pytest.mark.parametrize(
    ("kind", "folder", "label", "url"),
    [
        ("model", "models--org--tiny", f"org/tiny@{COMMIT}", f"hf://org/tiny@{COMMIT}/a/b.json"),
        (
            "dataset",
            "datasets--org--tiny",
            f"datasets/org/tiny@{COMMIT}",
            f"hf://datasets/org/tiny@{COMMIT}/a/b.json",
        ),
    ],
)
def test_an_entry_is_named_as_huggingface_hub_and_bake_add_name_it(
    kind: str, folder: str, label: str, url: str
) -> None:
    pinned = entry(kind)
    assert (pinned.folder, pinned.label, pinned.url("a/b.json")) == (folder, label, url)
    assert pinned.short_label == label[: -len(COMMIT)] + "0123456789ab"


@pytest.mark.parametrize(
    ("patterns", "whole"),
    [({}, True), ({"include": ("*.json",)}, False), ({"exclude": ("*.bin",)}, False)],
)
def test_only_an_entry_no_pattern_narrowed_is_the_whole_repository(patterns: dict, whole: bool) -> None:
    assert entry(**patterns).whole_repo is whole


def test_an_entry_hashes_by_its_repository_and_commit_alone() -> None:
    narrowed = HubEntry("org/tiny", "model", COMMIT, (SMALL,), include=("*.json",))
    assert hash(narrowed) == hash(entry()) and narrowed != entry()
    assert hash(entry("dataset")) != hash(entry())


def test_a_blob_lives_in_its_repository_folder_and_lists_each_entry_once() -> None:
    first, other = entry(), HubEntry("org/tiny", "model", "f" * 40, (SMALL,))
    blob = HubBlob(
        "models--org--tiny",
        SMALL.etag,
        ((first, "config.json"), (other, "config.json"), (first, "same.json")),
    )
    assert blob.entries == (first, other)
    assert blob_path(blob.folder, blob.etag) == f"hub/models--org--tiny/blobs/{'c' * 40}"

"""bake.add.hub_repo without a Hub: the hf:// URL of a repository, and the [[hub]] entry it appends.

Pinning against a Hub, end to end, is tested in tests/test_hub.py (a loopback Hub).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.add import hub_repo
from bake.errors import ManifestError, UsageError
from bake.manifest import parse_manifest

COMMIT = "a" * 40
SHA = "b" * 64
BLOB = "c" * 40
ENTRY = {
    "repo": "org/tiny",
    "type": None,
    "commit": COMMIT,
    "ref": "main",
    "include": [],
    "exclude": [],
    "groups": ["vllm"],
    "downloader": None,
    "files": [
        {"path": "config.json", "size": 3, "sha256": SHA, "blob": BLOB, "lfs": False},
        {"path": "w.bin", "size": 9, "sha256": "d" * 64, "blob": "e" * 40, "lfs": True},
    ],
}


@pytest.mark.parametrize(
    ("url", "repo_type", "expected"),
    [
        ("hf://org/tiny", None, ("org/tiny", "model", None)),
        ("hf://org/tiny/", None, ("org/tiny", "model", None)),
        ("hf://org/tiny@main", None, ("org/tiny", "model", "main")),
        ("hf://org/tiny@refs%2Fpr%2F1", None, ("org/tiny", "model", "refs/pr/1")),
        ("hf://datasets/org/table", None, ("org/table", "dataset", None)),
        ("hf://datasets/org/table@v1", "dataset", ("org/table", "dataset", "v1")),
        ("hf://org/table", "dataset", ("org/table", "dataset", None)),
    ],
)
def test_a_repository_url_names_repo_kind_and_revision(
    url: str, repo_type: str | None, expected: tuple
) -> None:
    assert hub_repo.is_repo_url(url)
    assert hub_repo.parse_url(url, repo_type) == expected


@pytest.mark.parametrize(
    ("url", "repo_type", "message"),
    [
        ("hf://org/tiny/config.json", None, "expected hf://ORG/REPO[@REVISION]"),
        ("hf://tiny", None, "expected hf://ORG/REPO[@REVISION]"),
        ("https://huggingface.co/org/tiny", None, "expected hf://ORG/REPO[@REVISION]"),
        ("hf://datasets/org/table", "model", "drop one of them"),
    ],
)
def test_anything_else_is_a_usage_error(url: str, repo_type: str | None, message: str) -> None:
    with pytest.raises(UsageError) as info:
        hub_repo.parse_url(url, repo_type)
    assert str(info.value).startswith(f"{url}: ") and message in str(info.value)


def test_one_file_is_no_repository_url() -> None:
    assert not hub_repo.is_repo_url("hf://org/tiny/config.json")
    assert not hub_repo.is_repo_url("hf://org/tiny@main/config.json")


def test_the_entry_text_is_one_record_a_line_and_parses_back() -> None:
    text = hub_repo.entry_text(ENTRY)
    lines = text.splitlines()
    assert lines[:5] == [
        "[[hub]]",
        'repo = "org/tiny"',
        f'commit = "{COMMIT}"',
        'ref = "main"',
        'groups = ["vllm"]',
    ]
    assert lines[5:] == [
        "files = [",
        f'  {{path = "config.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}", lfs = false}},',
        f'  {{path = "w.bin", size = 9, sha256 = "{"d" * 64}", blob = "{"e" * 40}", lfs = true}},',
        "]",
    ]
    (entry,) = parse_manifest(text).hub_entries
    assert (entry.repo, entry.kind, entry.commit, entry.ref, entry.groups) == (
        "org/tiny", "model", COMMIT, "main", ("vllm",)
    )  # fmt: skip
    assert [(f.path, f.lfs) for f in entry.files] == [("config.json", False), ("w.bin", True)]


def test_a_file_name_is_written_as_it_is_and_read_back_the_same() -> None:
    record = {"path": 'données/"quoted".txt', "size": 3, "sha256": SHA, "blob": BLOB, "lfs": False}
    (entry,) = parse_manifest(hub_repo.entry_text({**ENTRY, "files": [record]})).hub_entries
    assert [f.path for f in entry.files] == ['données/"quoted".txt']


def test_append_entry_keeps_every_byte_before_it(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    before = "# the site's manifest   (odd spacing kept)\n"
    manifest.write_text(before)
    hub_repo.append_entry(manifest, ENTRY)
    text = manifest.read_text()
    assert text.startswith(before) and text.endswith(hub_repo.entry_text(ENTRY))
    assert [e.commit for e in parse_manifest(text).hub_entries] == [COMMIT]


def test_append_entry_refuses_a_second_pin_and_writes_nothing(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    hub_repo.append_entry(manifest, ENTRY)
    once = manifest.read_bytes()
    with pytest.raises(ManifestError, match="pinned twice"):
        hub_repo.append_entry(manifest, ENTRY)
    assert manifest.read_bytes() == once

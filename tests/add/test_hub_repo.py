"""bake.add.hub_repo: the hf:// URL of a repository, the [[hub]] entry it appends, and pinning a repository
of a loopback Hub (tests/hub_server.py) at a commit, every selected file recorded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bake.add import hub_repo
from bake.errors import ManifestError, UsageError
from bake.manifest import parse_manifest
from tests.hub.conftest import BLOB, COMMIT, SHA, entries_of
from tests.hub_server import CONFIG, LFS_DATA, LoopbackHub
from tests.hub_server import bake_add as add

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


# -- against a loopback Hub (tests/hub_server.py) ---------------------------------


PRELUDE = '# site manifest: comments, order and spacing must survive `bake add`\n\n[[asset]]\nname = "x"\n'


def _prelude_asset() -> str:
    data_sha = hashlib.sha256(b"x").hexdigest()
    return (
        PRELUDE
        + f'path = "other/x.bin"\nsha256 = "{data_sha}"   # keep me\nurls = ["file:///nonexistent/x.bin"]\n'
    )


def test_add_resolves_the_branch_and_records_every_file(hub: LoopbackHub, env: dict, tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(_prelude_asset())
    before = hub.stats()
    add(manifest, env, "hf://org/tiny@main")
    text = manifest.read_text()
    assert text.startswith(_prelude_asset()), "the rest of the manifest must keep every byte"
    (entry_,) = entries_of(text)
    assert entry_.commit == hub.repos[("model", "org/tiny")]["refs"]["main"] and entry_.ref == "main"
    by_path = {f.path: f for f in entry_.files}
    assert set(by_path) == {"config.json", "tokenizer/vocab.txt", "same.json", "model.safetensors"}
    assert (
        by_path["model.safetensors"].lfs
        and by_path["model.safetensors"].sha256 == hashlib.sha256(LFS_DATA).hexdigest()
    )
    assert (
        by_path["config.json"].sha256 == hashlib.sha256(CONFIG).hexdigest() and not by_path["config.json"].lfs
    )
    # LFS hashes come from the Hub: adding never downloads the big file.
    assert hub.stats().get("cdn bytes", 0) == before.get("cdn bytes", 0)


def test_add_with_patterns_a_commit_and_a_dataset(hub: LoopbackHub, env: dict, tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    commit = hub.repos[("model", "org/tiny")]["refs"]["main"]
    add(
        manifest,
        env,
        f"hf://org/tiny@{commit}",
        "--include",
        "*.json",
        "--exclude",
        "same.*",
        "--group",
        "vllm",
    )
    add(manifest, env, "hf://org/table", "--repo-type", "dataset")
    entries = sorted(entries_of(manifest.read_text()), key=lambda e: e.kind, reverse=True)
    assert [f.path for f in entries[0].files] == ["config.json"] and entries[0].ref is None
    assert entries[0].groups == ("vllm",) and not entries[0].whole_repo
    assert entries[1].kind == "dataset" and [f.path for f in entries[1].files] == [
        "README.md",
        "data/train.csv",
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["hf://org/nope"], 3, "refused the repository"),
        (["hf://org/tiny@no-such-branch"], 3, "does not know that commit"),
        (["hf://org/gated"], 3, "set HF_TOKEN or HF_TOKEN_FILE"),
        (["hf://datasets/org/table", "--repo-type", "model"], 2, "drop one of them"),
        (["hf://org/tiny", "--sha256", "0" * 64], 2, "--sha256 is for one file"),
        (["hf://org/tiny/config.json", "--include", "*.json"], 2, "--include is for hf://ORG/REPO"),
        (["hf://org/tiny"], 2, "pinned twice"),
    ],
)
def test_add_failures_write_nothing(
    args: list[str], code: int, message: str, env: dict, tmp_path: Path
) -> None:
    manifest = tmp_path / "assets.toml"
    add(manifest, env, "hf://org/tiny")
    before = manifest.read_bytes()
    proc = add(manifest, env, *args, ok=False)
    assert (proc.returncode, manifest.read_bytes()) == (code, before), proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr

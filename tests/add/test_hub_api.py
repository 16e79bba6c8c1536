"""bake.add.hub_api: every field of a listing entry checked before it is used, and a listing read page by
page from a loopback Hub (tests/hub_server.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.add import hub_api
from bake.errors import FetchError
from bake.fetch.options import FetchOptions
from tests.hub.conftest import entries_of
from tests.hub_server import LoopbackHub
from tests.hub_server import bake_add as add

COMMIT = "a" * 40
BLOB = "c" * 40
SHA = "d" * 64


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> hub_api.HubReader:
    """A reader of org/tiny on an endpoint nothing answers: these tests never ask it anything."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login
    for var in ("HF_TOKEN", "HF_TOKEN_FILE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    return hub_api.HubReader("org/tiny", "model", FetchOptions(cache_dir=tmp_path / "cache"))


def test_the_endpoint_is_hf_endpoint_without_its_slash_else_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    assert hub_api.endpoint() == "http://127.0.0.1:9"
    monkeypatch.delenv("HF_ENDPOINT")
    assert hub_api.endpoint() == hub_api.DEFAULT_ENDPOINT == "https://huggingface.co"


def test_a_reader_names_its_repository_and_sends_no_token_it_has_not(reader: hub_api.HubReader) -> None:
    assert (reader.label, reader.endpoint) == ("hf://org/tiny", "http://127.0.0.1:9")
    assert reader.source.auth == {}
    dataset = hub_api.HubReader("org/table", "dataset", reader.options)
    assert dataset.label == "hf://datasets/org/table"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"type": "file", "path": "config.json", "size": 3, "oid": BLOB},
            hub_api.Listed("config.json", 3, BLOB, None),
        ),
        (
            {"type": "file", "path": "w/model.bin", "size": 9, "oid": BLOB, "lfs": {"oid": SHA, "size": 9}},
            hub_api.Listed("w/model.bin", 9, BLOB, SHA),
        ),
        ({"type": "directory", "path": "w", "oid": BLOB}, None),
    ],
)
def test_a_file_entry_is_listed_and_a_directory_is_none(
    reader: hub_api.HubReader, raw: dict, expected
) -> None:
    assert hub_api.checked_entry(reader, raw, COMMIT) == expected


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"type": "submodule", "path": "x"}, "answered an entry"),
        ("config.json", "answered an entry"),
        ({"type": "file", "path": "../x", "size": 1, "oid": BLOB}, "answered path '../x'"),
        ({"type": "file", "path": "/etc/passwd", "size": 1, "oid": BLOB}, "answered path"),
        ({"type": "file", "path": "a", "size": -1, "oid": BLOB}, "answered size -1"),
        ({"type": "file", "path": "a", "size": True, "oid": BLOB}, "answered size True"),
        ({"type": "file", "path": "a", "size": 1, "oid": "x" * 40}, "answered blob id (oid)"),
        (
            {"type": "file", "path": "a", "size": 1, "oid": BLOB, "lfs": {"oid": "e" * 63, "size": 1}},
            "lfs.oid",
        ),
        (
            {"type": "file", "path": "a", "size": 1, "oid": BLOB, "lfs": {"oid": SHA, "size": 2}},
            "answered LFS size 2",
        ),
        ({"type": "file", "path": "x" * 300, "size": 1, "oid": BLOB}, "a component"),
    ],
)
def test_a_bad_field_is_refused_naming_the_repository_and_the_field(
    reader: hub_api.HubReader, raw: object, field: str
) -> None:
    with pytest.raises(FetchError) as info:
        hub_api.checked_entry(reader, raw, COMMIT)
    message = str(info.value)
    assert message.startswith(f"hf://org/tiny@{COMMIT}") and field in message, message
    assert "Nothing was downloaded or written" in message


def test_add_follows_the_paged_listing(hub: LoopbackHub, env: dict, tmp_path: Path) -> None:
    """The tree listing comes a page at a time (1,000 entries on the Hub); every page is read, once."""
    files = {f"d{i % 2}/f{i}.txt": b"%d\n" % i for i in range(5)}
    hub.commit("org/paged", files)
    hub.hostile("org/paged", page_size=2)  # honest answers, small pages
    before = hub.stats()
    manifest = tmp_path / "assets.toml"
    add(manifest, env, "hf://org/paged")
    (entry_,) = entries_of(manifest.read_text())
    assert sorted(f.path for f in entry_.files) == sorted(files)
    tree = [k for k in hub.stats() if k.startswith("hub GET /api/models/org/paged/tree/")]
    pages = sum(hub.stats()[k] - before.get(k, 0) for k in tree)
    assert pages == 4, "2 directories and 5 files, 2 entries a page: 4 pages, each asked for once"

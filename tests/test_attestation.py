"""bake.attestation: the records of an image's files, the predicate, and reading and comparing statements.

Pure functions, no cosign or registry: the signing round trip is in tests/test_signing.py.
"""

from __future__ import annotations

import pytest

from bake.asset import Asset
from bake.attestation import PREDICATE_TYPE, FileRecord, differences, predicate, read_statement, records_of
from bake.hub.entry import HubBlob, HubEntry, HubFile


def test_hub_blobs_attest_their_repository_commit_and_path_and_urls_lose_credentials() -> None:
    entry = HubEntry("org/model", "model", "a" * 40, (HubFile("config.json", 2, "b" * 64, "c" * 40),))
    blob = HubBlob("models--org--model", "c" * 40, ((entry, "config.json"),))
    hub = Asset(
        "h", f"hub/models--org--model/blobs/{'c' * 40}", "b" * 64, ("hf://org/model@x/c",), 2, hub=blob
    )
    plain = Asset("p", "p.bin", "d" * 64, ("https://user:pw@host/p.bin?token=t",))
    records = records_of([plain, hub], {"p.bin": 9})
    assert [r.document() for r in records] == [
        {"path": hub.path, "size": 2, "sha256": "b" * 64,
         "hub": [{"repo": "org/model", "kind": "model", "commit": "a" * 40, "path": "config.json"}]},
        {"path": "p.bin", "size": 9, "sha256": "d" * 64, "urls": ["https://user:***@host/p.bin?token=***"]},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("attested", "expected"),
    [
        ({"a": (1, "x")}, []),
        ({"a": (None, "x")}, []),
        ({}, ["omits a"]),
        ({"a": (1, "x"), "b": (2, "y")}, ["lists b, which is not selected"]),
        ({"a": (1, "z")}, ["a: sha256 z, expected x"]),
        ({"a": (2, "x")}, ["a: 2 bytes, expected 1"]),
    ],
)
def test_differences_compare_paths_sha256_and_known_sizes(attested, expected) -> None:
    assert differences(attested, [FileRecord("a", 1, "x")]) == expected


def test_statements_about_another_image_are_not_read() -> None:
    statement = {
        "_type": "https://in-toto.io/Statement/v0.1",
        "predicateType": PREDICATE_TYPE,
        "subject": [{"name": "r", "digest": {"sha256": "1" * 64}}],
        "predicate": predicate([], "m"),
    }
    assert read_statement(statement, "sha256:" + "1" * 64).manifest_digest == "m"
    with pytest.raises(ValueError, match="its subject is not the image"):
        read_statement(statement, "sha256:" + "2" * 64)
    with pytest.raises(ValueError, match="predicate type"):
        read_statement({**statement, "predicateType": "https://slsa.dev/provenance/v1"}, "sha256:" + "1" * 64)

"""bake.hub.schema: the [[hub]] table, parsed into one asset per blob or refused naming the entry."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bake import servefile
from bake.errors import ManifestError
from bake.manifest import manifest_digest, parse_manifest
from tests.hub.conftest import BLOB, COMMIT, SHA, entry, files, rec, serve_records
from tests.runners import bake


def test_an_entry_becomes_one_asset_per_blob() -> None:
    files = (
        f'[{{path = "a.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}, '
        f'{{path = "b/a.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}, '
        f'{{path = "w.bin", size = 9, sha256 = "{"d" * 64}", blob = "{"e" * 40}", lfs = true}}]'
    )
    assets = parse_manifest(entry(files=files, groups='["vllm"]'))
    assert [(a.path, a.sha256, a.size, a.groups) for a in assets] == [
        (f"hub/models--org--tiny/blobs/{BLOB}", SHA, 3, ("vllm",)),
        (f"hub/models--org--tiny/blobs/{'d' * 64}", "d" * 64, 9, ("vllm",)),
    ]
    assert assets[0].urls == (f"hf://org/tiny@{COMMIT}/a.json", f"hf://org/tiny@{COMMIT}/b/a.json")
    assert assets[0].name == f"org/tiny@{COMMIT[:12]}/a.json"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"revision": '"main"'}, "unknown key(s) revision"),
        ({"commit": '"abc123"'}, "full 40-hex commit SHA"),
        ({"repo": '"tiny"'}, "repo must be ORG/NAME"),
        ({"repo": '"org/a--b"'}, "repo must be ORG/NAME"),
        ({"type": '"space"'}, "type must be one of model, dataset"),
        ({"ref": f'"{COMMIT}"'}, "is a commit SHA"),
        ({"ref": '"../main"'}, "normalised relative path"),
        ({"downloader": '"curl"'}, "downloader must be one of"),
        ({"files": "[]"}, "files must be a non-empty list"),
        ({"files": files(rec(path="../x"))}, "no '..'"),
        ({"files": files(rec(path="a\tb"))}, "control characters"),
        ({"files": files(rec(x=1))}, "unknown key(s) x"),
        ({"files": files(rec(size=-1))}, "size must be"),
        ({"files": files(rec(sha256=SHA[:-1]))}, "sha256 must be"),
        ({"files": files(rec(blob="x"))}, "git blob id"),
        ({"files": files(rec(lfs=1))}, "lfs must be"),
        ({"files": files(rec(), rec())}, "listed twice"),
        ({"files": files(rec(), rec(path="b", size=2))}, "the records disagree"),
        ({"files": files(rec(), rec(path="a/b"))}, "which is a file"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(overrides: dict, expected: str) -> None:
    with pytest.raises(ManifestError, match="hub") as info:
        parse_manifest(entry(**overrides))
    assert expected in str(info.value)


_HOSTILE = st.text(alphabet=st.sampled_from(list("ab/.\\-_ \t\n?#%*~@0f")), max_size=12)


_VALUE = st.one_of(
    _HOSTILE,
    st.integers(-2, 2**40),
    st.booleans(),
    st.lists(_HOSTILE, max_size=2),
    st.sampled_from([SHA, BLOB]),
)


@settings(
    max_examples=300 if os.environ.get("CI") else 100, derandomize=bool(os.environ.get("CI")), deadline=None
)
@given(
    st.dictionaries(st.sampled_from(["path", "size", "sha256", "blob", "lfs", "x"]), _VALUE, max_size=6),
    st.dictionaries(st.sampled_from(["repo", "commit", "ref", "type", "include", "downloader"]), _VALUE),
)
def test_any_hub_entry_is_parsed_or_refused_with_exit_2(record: dict, head: dict) -> None:
    """Whatever a [[hub]] table holds, the parser returns assets or raises ManifestError, nothing else."""
    import tomlkit

    base = {"path": "a", "size": 1, "sha256": SHA, "blob": BLOB}
    table = {"repo": "org/tiny", "commit": COMMIT, **head, "files": [{**base, **record}]}
    try:
        assets = parse_manifest(tomlkit.dumps({"hub": [table]}))
    except ManifestError:
        return
    for asset in assets:  # what was accepted is safe to lay out and to serve
        assert asset.path.startswith("hub/models--") and "\t" not in asset.name and ".." not in asset.path
        records = serve_records(assets)
        assert servefile.read(servefile.write(records)).refused == []  # the entrypoint reads them all


def test_bad_manifests_exit_2_through_the_cli(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(entry() + entry())
    proc = bake("manifest", "--manifest", str(manifest))
    assert proc.returncode == 2
    assert f"org/tiny@{COMMIT}: pinned twice" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_digest_covers_hub_entries_and_is_unchanged_without_them() -> None:
    plain = f'[[asset]]\nname = "a"\npath = "a/x"\nsha256 = "{SHA}"\nurls = ["https://example.org/x"]\n'
    assets = parse_manifest(plain)
    listing = [{"path": "a/x", "sha256": SHA, "size": None}]
    expected = hashlib.sha256(json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert manifest_digest(assets) == expected
    renamed = entry(files=f'[{{path = "renamed.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]')
    same_blobs = [manifest_digest(parse_manifest(plain + e)) for e in (entry(), renamed, entry(ref='"main"'))]
    assert len(set(same_blobs)) == 3  # same blob bytes, different layouts: different digests
    # The threshold cuts a Hub entry's files into units, so the index and whole images differ with it.
    units = "[units]\nhub_file_threshold = 1\n"
    assert manifest_digest(parse_manifest(units + plain + entry())) != same_blobs[0]
    assert manifest_digest(parse_manifest(units + plain)) == expected  # no Hub entry: no difference

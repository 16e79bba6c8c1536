"""bake.hub.layout: huggingface_hub's own cache layout, and the bake.serve records that serve it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bake import servefile
from bake.hub import layout
from bake.manifest import parse_manifest
from tests.hub.conftest import BLOB, COMMIT, SHA, entries_of, entry, serve_records


def test_tree_listing_is_what_huggingface_hub_writes(tmp_path: Path) -> None:
    from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache

    files = f'[{{path = "z.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}, ' + (
        f'{{path = "a/w.bin", size = 9, sha256 = "{"d" * 64}", blob = "{"e" * 40}", lfs = true}}]'
    )
    (hub_entry,) = entries_of(entry(files=files))
    write_tree_cache(
        str(tmp_path),
        COMMIT,
        {
            "z.json": TreeCacheEntry(size=3, blob_id=BLOB),
            "a/w.bin": TreeCacheEntry(size=9, blob_id="e" * 40, lfs_sha256="d" * 64, lfs_size=9),
        },
    )
    assert (tmp_path / "trees" / f"{COMMIT}.json").read_text() == layout.tree_json(hub_entry)


def test_serve_records_follow_huggingface_hubs_precedence() -> None:
    files = f'[{{path = "d/c.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]'
    records = serve_records(parse_manifest(entry(files=files, ref='"main"')))
    locs = [r for r in records if isinstance(r, servefile.Loc)]
    assert [(r.id, r.var, r.fallback) for r in locs] == [
        ("hub.xdg", "XDG_CACHE_HOME", "$HOME/.cache"),
        ("hub.home", "HF_HOME", "@hub.xdg"),
        ("hub.legacy", "HUGGINGFACE_HUB_CACHE", "@hub.home"),
        ("hub.0", "HF_HUB_CACHE", "@hub.legacy"),
    ]
    folder, ref = "models--org--tiny", hashlib.sha256(COMMIT.encode()).hexdigest()
    (the_set,) = [r for r in records if isinstance(r, servefile.ServedSet)]
    assert (the_set.consumer, the_set.state, the_set.root) == ("hub", ".locks/.bake", "hub")
    assert the_set.bytes == 3 + 40 + len(
        layout.tree_json(parse_manifest(entry(files=files))[-1].hub.entries[0])
    )
    # A blob is held by node storage only; the ref (and tree listing) by both views, copied.
    assert servefile.File("hub", "copied", f"{folder}/blobs/{BLOB}", 3, SHA) in records
    assert servefile.File("hub", "both", f"{folder}/refs/main", 40, ref) in records
    assert servefile.Place("hub", "copy", f"hub/{folder}/refs/main", f"{folder}/refs/main") in records
    # Every file of the commit is baked: the linked view links its snapshot directory whole.
    snapshot = f"{folder}/snapshots/{COMMIT}"
    assert servefile.Place("hub", "link", f"hub/{snapshot}", snapshot) in records
    assert servefile.Link("hub", f"{snapshot}/d/c.json", f"../../../blobs/{BLOB}") in records
    assert servefile.Dir("hub", "copied", f"{snapshot}/d") in records
    assert servefile.read(servefile.write(records)).refused == []
    plain = f'[[asset]]\nname = "a"\npath = "a/x"\nsha256 = "{SHA}"\nurls = ["https://e.org/x"]\n'
    assert serve_records(parse_manifest(plain)) == []


def test_a_narrowed_commit_is_linked_file_by_file() -> None:
    files = f'[{{path = "d/c.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]'
    records = serve_records(parse_manifest(entry(files=files, include='["d/*"]')))
    snapshot = f"models--org--tiny/snapshots/{COMMIT}"
    assert servefile.Place("hub", "tree", f"hub/{snapshot}", snapshot) in records
    assert servefile.Dir("hub", "both", f"{snapshot}/d") in records
    assert not any(isinstance(r, servefile.File) and "/trees/" in r.name for r in records)

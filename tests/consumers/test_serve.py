"""bake.consumers.serve: each consumer's records of bake.serve, in the table's name order."""

from __future__ import annotations

import pytest

from bake import consumers, index, servefile
from bake.locations import parse_location
from bake.manifest import load_manifest
from tests.runners import REPO


class Chained(consumers.Consumer):
    """A consumer with its own records, as the Hub registers one: a chained fallback and a link."""

    def serve_records(self, files, aliases):
        parts = [
            servefile.Dir(self.name, "both", "."),
            servefile.Place(self.name, "tree", self.name, "."),
            *(
                servefile.File(self.name, "both", self.name_in_location(f.path), f.size, f.sha256)
                for f in files
            ),
            servefile.Link(self.name, "latest", "v1"),
        ]
        return [
            servefile.Loc("chained.base", "-", "under", "XDG_CACHE_HOME", "chained", "$HOME/.cache"),
            servefile.Loc("chained.0", self.name, "under", "CHAINED_HOME", "", "@chained.base"),
            servefile.served_set(self.name, ".bake", self.name, "chained", parts),
            *parts,
        ]


def test_a_consumer_may_write_its_own_records_and_chain_locations() -> None:
    chained = Chained("chained", [parse_location("${CHAINED_HOME:-/opt/chained}", "")])
    files = [index.LockedFile("chained/v1", 3, "0" * 64), index.LockedFile("tiktoken/x", 1, "1" * 64)]
    lines = consumers.serve_text(consumers.table([chained]), files).splitlines()
    sets = [line.split("\t")[:2] for line in lines if line.startswith("set\t")]
    assert [line for line in lines if not line.startswith("set\t")] == [
        "# bake serve v1",
        "loc\tchained.base\t-\tunder\tXDG_CACHE_HOME\tchained\t$HOME/.cache",
        "loc\tchained.0\tchained\tunder\tCHAINED_HOME\t\t@chained.base",
        "loc\ttiktoken.0\ttiktoken\texport\tTIKTOKEN_RS_CACHE_DIR\t\t",
        "loc\ttiktoken.1\ttiktoken\texport\tTIKTOKEN_CACHE_DIR\t\t",
        "dir\tchained\tboth\t.",
        "dir\ttiktoken\tboth\t.",
        "place\tchained\ttree\tchained\t.",
        "place\ttiktoken\tlink\ttiktoken/x\tx",
        f"file\tchained\tboth\tv1\t3\t{'0' * 64}",
        f"file\ttiktoken\tboth\tx\t1\t{'1' * 64}",
        "link\tchained\tlatest\tv1",
    ]
    assert sets == [["set", "chained"], ["set", "tiktoken"]]
    assert consumers.declared_from_serve("\n".join(lines)) == []


@pytest.mark.parametrize("manifest", ["docker/assets.toml", "tests/image/assets.toml"])
def test_a_manifest_that_bakes_none_of_vllms_assets_is_served_as_before(manifest: str) -> None:
    """A new built-in writes records only for files it owns: bake.serve is what it was without it."""
    assets = load_manifest(REPO / manifest)
    files = [a for a in assets if not a.path.startswith("vllm_public_assets/")]
    table = assets.consumers()
    before = [c for c in table if not isinstance(c, consumers.VllmAssets)]
    assert len(before) == len(table) - 1
    assert consumers.serve_text(table, files) == consumers.serve_text(before, files)

"""Too many units against ``bake/layers.py``: said by ``manifest check``, ``publish`` and ``pin`` first.

More units than bake's budget are named before anything is built; since issue 39 the smallest are
packed into one, so that no selection makes more layers than an image can run on. (Round 5, issue
38: R5-6.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import NO_ENGINE, asset_entry, bake, blob, manifest_text

pytestmark = pytest.mark.timeout(180)


def many(tmp_path: Path, count: int, layer: str | None = None) -> Path:
    entries = []
    for i in range(count):
        entry = asset_entry(f"f{i:03}", f"data/f{i:03}.bin", blob(16, i), f"https://example.org/f{i}")
        entries.append({**entry, "layer": layer} if layer else entry)
    path = tmp_path / f"many-{count}-{layer}.toml"
    path.write_text(manifest_text(entries))
    return path


def test_more_units_than_the_budget_are_packed_and_each_command_says_so_before_the_registry(
    tmp_path: Path,
) -> None:
    """Issue 39 made the budget a limit: past it the smallest units are packed into one, so no
    selection makes more layers than an image can run on, and nothing is refused for its count."""
    manifest = many(tmp_path, 130)
    (tmp_path / "Dockerfile").write_text("COPY --from=r.example/x / /\n")
    for command, code in (
        (["manifest", "check", "--manifest", manifest], 0),
        (["publish", "--manifest", manifest, "--repository", "r.example/x"], 5),
        (["pin", "--manifest", manifest, "--repository", "r.example/x", "Dockerfile"], 5),
    ):
        proc = bake(*command, cwd=tmp_path, env=NO_ENGINE)
        assert proc.returncode == code, (command, proc.stderr)
        assert "131 image layers (130 units and the index)" in proc.stderr, proc.stderr
        assert "the 68 smallest units (1088 bytes) are packed into one, pack" in proc.stderr
        assert 'the 130 assets under data/ could all take layer = "data"' in proc.stderr
        assert proc.stderr.index("image layers") < proc.stderr.index("bake: error") if code else True


def test_more_units_than_the_budget_are_packed_and_a_layer_group_is_one_unit(tmp_path: Path) -> None:
    warned = bake("manifest", "check", "--manifest", many(tmp_path, 70), cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "bake: warning: the selection makes 71 image layers" in warned.stderr
    assert "keeps to 64" in warned.stderr and "the 8 smallest units" in warned.stderr
    grouped = bake("manifest", "check", "--manifest", many(tmp_path, 130, "data"), cwd=tmp_path)
    assert grouped.returncode == 0 and "image layers" not in grouped.stderr, grouped.stderr

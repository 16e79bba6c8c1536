"""bake.seed.view: the job-local view of a re-pointed variable's directory."""

from __future__ import annotations

import stat
from pathlib import Path

from bake.seed import view


def test_a_view_links_every_finished_entry_and_makes_the_path_to_sub_real(tmp_path: Path) -> None:
    base = tmp_path / "hf home"
    (base / "hub" / "models--other").mkdir(parents=True)
    (base / "token").write_bytes(b"t")
    (base / ".hidden").write_bytes(b"h")
    (base / "x.lock").write_bytes(b"")
    (base / "a link").symlink_to(tmp_path)
    (base / "s3tokenizer").mkdir()

    made = view.make(tmp_path / "tmp", "XDG_CACHE_HOME", base, "s3tokenizer", set())

    assert made.parent == tmp_path / "tmp" and made.name.startswith("bake-XDG_CACHE_HOME.")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert sorted(p.name for p in made.iterdir()) == [".hidden", "hub", "s3tokenizer", "token"]
    assert (made / "hub").is_symlink() and (made / "hub").samefile(base / "hub")
    assert (made / "s3tokenizer").is_dir() and not (made / "s3tokenizer").is_symlink()
    assert list((made / "s3tokenizer").iterdir()) == []
    served_there = view.make(tmp_path / "tmp", "TIKTOKEN_CACHE_DIR", base, "", {"hub", ".bake"})
    assert sorted(p.name for p in served_there.iterdir()) == [".hidden", "s3tokenizer", "token"]

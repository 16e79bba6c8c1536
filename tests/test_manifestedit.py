"""bake.manifestedit: a manifest edited in place (a link's target), under the directory's lock, by a rename.

Real files in tmp_path; two adds racing into one manifest are in tests/reliability/test_add_safety.py.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from pathlib import Path

import pytest

from bake import manifestedit
from bake.errors import UsageError
from bake.manifestedit import appended, check_writable, locked, replace, target_of

MANIFEST = """# Assets for the speech stack; keep the pins in step with the models.

[[asset]]  # the tokenizer
name = "vocab"
path = "tiktoken/abc"   # the sha1 of the URL
sha256 = "{sha}"
urls = ["https://example.org/vocab"]
""".format(sha="0" * 64)
ENTRY = '[[asset]]\nname = "m"\npath = "m.onnx"\nsha256 = "{}"\nurls = ["https://example.org/m"]\n'.format(
    "1" * 64
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ENTRY),
        ("a = 1\n", "a = 1\n\n" + ENTRY),
        ("a = 1\n\n", "a = 1\n\n" + ENTRY),
        ("a = 1", "a = 1\n\n" + ENTRY),
    ],
    ids=["empty", "one newline", "a blank line", "no newline"],
)
def test_an_entry_is_appended_after_one_blank_line(text: str, expected: str) -> None:
    assert appended(text, ENTRY) == expected


def test_an_edit_keeps_comments_and_mode_and_replaces_the_file_by_a_rename(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(MANIFEST)
    manifest.chmod(0o600)
    before = manifest.stat().st_ino
    with locked(manifest) as target:
        replace(target, appended(target.read_text(), ENTRY))
    assert manifest.read_text() == MANIFEST + "\n" + ENTRY
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o600 and manifest.stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assets.toml"], "no staging file is left behind"


def test_a_new_manifest_is_written_0644(tmp_path: Path) -> None:
    manifest = tmp_path / "new.toml"
    replace(manifest, ENTRY)
    assert manifest.read_text() == ENTRY and stat.S_IMODE(manifest.stat().st_mode) == 0o644


def test_an_edit_through_links_changes_their_target_and_keeps_the_links(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    real = tmp_path / "real/assets.toml"
    real.write_text(MANIFEST)
    (tmp_path / "middle.toml").symlink_to(real)
    link = tmp_path / "assets.toml"
    link.symlink_to("middle.toml")
    assert target_of(link) == real.resolve()
    with locked(link) as target:
        replace(target, appended(target.read_text(), ENTRY))
    assert link.is_symlink() and os.readlink(link) == "middle.toml"
    assert real.read_text() == MANIFEST + "\n" + ENTRY


def test_a_held_lock_is_waited_for_then_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(MANIFEST)
    monkeypatch.setattr(manifestedit, "LOCK_WAIT", 0.2)
    other = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)  # another add's hold on the directory
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        held = re.escape(f"another bake add has held the lock on {tmp_path} for 0.2 s")
        with pytest.raises(UsageError, match=held), locked(manifest):
            pass
    finally:
        os.close(other)
    with locked(manifest) as target:  # let go: the next edit takes it at once
        assert target == manifest


def test_a_manifest_whose_directory_is_missing_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    missing = tmp_path / "no/such/assets.toml"
    with pytest.raises(UsageError) as caught:
        check_writable(missing)
    assert f"its directory {tmp_path / 'no/such'} does not exist" in str(caught.value)
    assert str(caught.value).endswith("nothing was fetched") and caught.value.exit_code == 2
    with pytest.raises(UsageError, match="cannot open its directory"), locked(missing):
        pass
    with pytest.raises(UsageError, match=r"cannot write it .*nothing was written"):
        replace(missing, ENTRY)
    check_writable(tmp_path / "assets.toml")  # a directory that takes the edit

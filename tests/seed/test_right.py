"""bake.seed.right: the right to copy, flock where it works, an exclusive mkdir where it fails."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bake.seed import right


def test_the_lock_excludes_and_a_failing_lock_call_makes_the_claim_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / ".bake"
    state.mkdir()
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first, second = right.Right(fd, str(state)), right.Right(fd, str(state))
        assert first.take() and not second.take()
        first.release()
        assert second.take()
        second.release()

        def no_locks(fd: int, mode: int) -> bool:
            raise OSError(errno.ENOLCK, "No locks available")

        monkeypatch.setattr(right, "try_flock", no_locks)
        first, second = right.Right(fd, str(state)), right.Right(fd, str(state))
        assert first.take() and not second.take()
        assert (
            first.note
            == f"flock on {state}/lock failed: No locks available, so an exclusive mkdir of copying stands "
            "in for the lock"
        )
        seen = (state / "copying").stat().st_ino
        assert not second.take_over(seen + 1)  # a claim the judge did not see stand still: progress
        assert second.take_over(seen) and (state / "copying").is_dir()
        first.release()  # its claim was taken: it removes nothing of the new one's...
        second.release()
    finally:
        os.close(fd)
    assert sorted(p.name for p in state.iterdir()) == ["lock"]

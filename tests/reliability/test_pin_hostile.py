"""Hostile files against ``bake/pin.py``: a FIFO is refused unread; several files are edited in place, all
or none. (Round 4, issue 29: findings 10 and 12.)"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bake.errors import UsageError
from bake.pin import pin_files

from .pinning import PINNED, REPO

pytestmark = pytest.mark.timeout(120)


# ---- finding 10 (pin): a FIFO is refused, never read ------------------------------------------


PIN_ONE = (
    "import sys; from bake.pin import pin_files; pin_files(sys.argv[1:], 'r.example/x', 'r', check=False)"
)


@pytest.mark.timeout(20)
def test_a_fifo_dockerfile_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "Dockerfile"
    os.mkfifo(fifo)
    code = subprocess.run(
        ["timeout", "10", sys.executable, "-c", PIN_ONE, str(fifo)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert code.returncode == 1 and "not a regular file" in code.stderr, code.stderr


# ---- finding 12: several files at once, each edited in place ---------------------------------


def test_a_failure_on_the_second_file_leaves_the_first_unchanged(tmp_path: Path, tmpfs) -> None:
    first = tmp_path / "Dockerfile.a"
    first.write_text(f"FROM {REPO}:old\n")
    ro = tmpfs("ro", 1 << 20)
    second = ro / "Dockerfile.b"
    second.write_text(f"FROM {REPO}:old\n")
    subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
    with pytest.raises(UsageError) as caught:
        pin_files([first, second], REPO, PINNED, check=False)
    assert first.read_text() == second.read_text() == f"FROM {REPO}:old\n"
    assert f"{second}: cannot write it" in str(caught.value) and "no file was changed" in str(caught.value)


def test_pinning_keeps_the_inode_the_owner_and_the_mode(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {REPO}:old\n")
    os.link(dockerfile, tmp_path / "linked")
    os.chown(dockerfile, 1234, 4321)
    dockerfile.chmod(0o640)
    before = dockerfile.stat()
    pin_files([dockerfile], REPO, PINNED, check=False)
    after = dockerfile.stat()
    assert (after.st_ino, after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_ino, 1234, 4321, 0o640
    )  # fmt: skip
    assert (tmp_path / "linked").read_text() == f"FROM {PINNED}\n"

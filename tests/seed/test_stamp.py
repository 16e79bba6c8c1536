"""bake.seed.stamp: the stamp's lines, byte for byte what the entrypoint's stat prints (GNU and busybox)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.runners import cli_env
from tests.serve import require


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Berlin"])
@pytest.mark.parametrize("stat_tool", ["stat", "busybox"])
def test_a_stamp_line_is_what_gnu_and_busybox_stat_print(tmp_path: Path, zone: str, stat_tool: str) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    argv = [require("stat")] if stat_tool == "stat" else [require("busybox"), "stat"]
    printed = subprocess.run(
        [*argv, "-c", "%i %y %z", str(directory)],
        env={"TZ": zone},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = subprocess.run(
        [sys.executable, "-c", "import os, sys; from bake.seed import stamp; "
         "print(stamp.stat_line(os.stat(sys.argv[1])))",
         str(directory)],
        env=cli_env({"TZ": zone}), capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert ours == printed

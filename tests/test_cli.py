"""The ``bake`` command line as a whole: usage errors exit 2 and say why. Each command's own files, messages
and exit codes are tested in its file under tests/commands/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runners import REPO, bake


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["fetch"], id="fetch-no-dest"),
        pytest.param(["fetch", "--dest", "d", "--connections", "0"], id="connections-zero"),
        pytest.param(["fetch", "--dest", "d", "--mirror", "no-equals-sign"], id="bad-mirror"),
        pytest.param(["fetch", "--dest", "d", "--no-origin"], id="no-origin-without-mirror"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    result = bake(*args, cwd=REPO)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip(), "every non-zero exit says why on stderr"

"""bake seed (bake/seed/) as a whole: the command bake's CLI lists, and the path the entrypoint runs it by.
Each module's own tests are in tests/seed/ (the command's line and exit codes in tests/seed/test_command.py);
the entrypoint's runs of it, racing, killed and on hostile volumes, are in the entrypoint's own tests
(tests/test_entrypoint.py, and the reliability suite).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake.seed import command
from tests.runners import cli_env


def test_bake_lists_seed_with_its_exit_codes() -> None:
    from bake.cli import EXIT_CODES, main

    assert EXIT_CODES["seed"] == (0, 2, 3, 6)
    with pytest.raises(SystemExit) as done:
        main(["seed", "--help"])
    assert done.value.code == 0


@pytest.fixture
def cleanup() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def test_the_entrypoints_path_loads_no_more_than_the_seeder(tmp_path: Path) -> None:
    # `python -m bake seed` is what bake-entrypoint runs at job start: the rest of the CLI (110 ms of
    # imports: the fetch engine, the manifest, the index) stays unloaded. (Its --help is the CLI's.)
    probe = (
        f"import runpy, sys\nsys.argv = ['bake', 'seed', '--assets', {str(tmp_path)!r}]\n"
        "try:\n    runpy.run_module('bake', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('bake')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=cli_env(), capture_output=True, text=True, check=True
    )
    loaded = eval(done.stdout.strip().splitlines()[-1])
    assert "bake.cli" not in loaded and "bake.fetch" not in loaded and "bake.manifest" not in loaded
    assert command.__name__ in loaded

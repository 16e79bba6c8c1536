"""bake.testing.local: the running system (``--bake-local``), its asset root, its files and its jobs.

Everything runs here, on real files and child processes; the whole plugin in this mode is in
tests/test_testing.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bake.testing.image import DEFAULT_ROOT, SMALL_FILE, ImageError
from bake.testing.local import OWN_LIB, RunningSystem


def test_the_asset_root_is_bake_assets_else_the_images_layout() -> None:
    assert RunningSystem({"BAKE_ASSETS": "/data/assets"}).asset_root == "/data/assets"
    system = RunningSystem({"BAKE_ASSETS": ""})
    assert system.asset_root == DEFAULT_ROOT
    assert system.ref == f"the running system (assets at {DEFAULT_ROOT})"
    assert (Path(system.lib) / "bake/testing/local.py").is_file() and system.lib == OWN_LIB


def test_read_file_returns_the_bytes_or_none_and_refuses_a_directory(tmp_path: Path) -> None:
    (tmp_path / "bake.lock.json").write_bytes(b'{"assets": []}\n')
    system = RunningSystem({"BAKE_ASSETS": str(tmp_path)})
    assert system.read_file(f"{tmp_path}/bake.lock.json") == b'{"assets": []}\n'
    assert system.read_file(f"{tmp_path}/bake.serve") is None
    with pytest.raises(ImageError, match="is a directory; expected a file written by `bake seal`"):
        system.read_file(str(tmp_path))


def test_read_file_refuses_a_document_larger_than_a_lock_could_be(tmp_path: Path) -> None:
    big = tmp_path / "bake.lock.json"
    with big.open("wb") as handle:
        handle.truncate(SMALL_FILE + 1)  # sparse: nothing is written
    with pytest.raises(ImageError, match=f"larger than {SMALL_FILE} bytes; expected a small document"):
        RunningSystem({}).read_file(str(big))


def test_a_job_runs_here_with_this_environment_and_its_own_on_top() -> None:
    system = RunningSystem({"PATH": os.environ["PATH"], "FROM_SYSTEM": "1", "PYTHONPATH": "/elsewhere"})
    script = "import os, sys; print(sys.executable, os.environ['FROM_SYSTEM'], os.environ['FROM_JOB']); "
    script += "print(os.environ['PYTHONPATH']); sys.exit(3)"
    job = system.run("python3", "-c", script, environment={"FROM_JOB": "2"})
    assert job.exit_code == 3 and job.stderr == ""
    assert job.stdout == f"{sys.executable} 1 2\n{OWN_LIB}{os.pathsep}/elsewhere\n"


def test_bake_in_a_job_is_this_bake() -> None:
    job = RunningSystem({"PATH": os.environ["PATH"]}).run("bake", "--version")
    assert job.exit_code == 0, job.describe()
    assert job.stdout.startswith("bake ")


def test_a_job_that_cannot_start_or_outlives_its_timeout_is_reported_not_raised() -> None:
    system = RunningSystem({"PATH": os.environ["PATH"]})
    missing = system.run("no-such-program-here")
    assert missing.exit_code == 127 and "bake.testing: cannot run no-such-program-here" in missing.stderr
    slow = system.run("python3", "-c", "import time; print('started', flush=True); time.sleep(30)", timeout=1)
    assert slow.exit_code == -1
    assert slow.stderr == "bake.testing: the job did not finish within 1 s; it was killed"

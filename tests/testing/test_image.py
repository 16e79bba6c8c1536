"""bake.testing.image without an engine: the directories checked, a job's description, an absent engine.

What needs an image (reading its files, running jobs through its ENTRYPOINT) is checked against
the test image in tests/image/test_plugin.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.testing.image import ImageError, JobResult, docker_client, parent_dirs


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        ([], ["/opt/bake/assets"]),
        (["m.onnx"], ["/opt/bake/assets"]),
        (
            ["a/b/c.bin", "a/d.bin", "e/f"],
            ["/opt/bake/assets", "/opt/bake/assets/a", "/opt/bake/assets/a/b", "/opt/bake/assets/e"],
        ),
    ],
)
def test_parent_dirs_are_the_root_and_every_directory_down_to_each_asset(
    paths: list[str], expected: list[str]
) -> None:
    assert parent_dirs("/opt/bake/assets", paths) == expected


def test_a_job_is_described_by_its_exit_code_and_both_streams() -> None:
    job = JobResult(3, "out line\n", "err line\n")
    assert job.describe() == "exit 3\n--- stdout\nout line\n--- stderr\nerr line\n"


def test_an_engine_that_does_not_answer_is_an_image_error_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    with pytest.raises(
        ImageError, match=r"^the Docker engine does not answer \(.*\); start it or set DOCKER_HOST$"
    ):
        docker_client()

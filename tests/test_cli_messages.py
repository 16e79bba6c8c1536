"""Messages that used to send users the wrong way (issue 17's list): each now names what is true.

``bake build`` outside git suggested a path it does not take; ``--dst`` was reported only as
"--dest required". The messages of one command are tested in its file under tests/commands/
(``bake doctor``'s options, ``manifest check`` beside a declared consumer, the default manifest's absence).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runners import bake


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fetch", "--dst", "out"], "unknown option --dst (did you mean --dest?)"),
        (["verify", "--dest", "d", "--dst", "x"], "unknown option --dst (did you mean --dest?)"),
        (["fetch", "--des", "out"], "unknown option --des (did you mean --dest?)"),
        (
            ["pin", "--repo", "r.example/x", "Dockerfile"],
            "unknown option --repo (did you mean --repository?)",
        ),
        (
            ["cache", "prune", "--max-ag", "3"],
            "unknown option --max-ag (did you mean --max-age?) (see `bake cache prune --help`)",
        ),
    ],
    ids=["missing required too", "only unknown", "no abbreviations", "publish and pin", "nested command"],
)
def test_a_misspelt_option_is_named_with_the_closest_real_one(
    args: list[str], says: str, tmp_path: Path
) -> None:
    proc = bake(*args, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["pin", "--repository=--", "Dockerfile"],
        ["publish", "--manifest", "m.toml", "--repository=--"],
        ["fetch", "--manifest=--", "--dest", "out"],
        ["fetch", "--dest", "out", "--group=--"],
    ],
    ids=["pin", "publish", "a path option", "a repeated option"],
)
def test_an_option_whose_value_is_a_double_dash_is_a_usage_error(args: list[str], tmp_path: Path) -> None:
    # Python 3.10 and 3.11's argparse store an empty list for `--opt=--`; it once reached pin as a traceback.
    proc = bake(*args, cwd=tmp_path)
    option = next(a for a in args if a.endswith("=--")).removesuffix("=--")
    assert proc.returncode == 2, proc.stderr
    assert f"argument {option}: expected a value, got '--'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_build_outside_git_suggests_what_build_takes(tmp_path: Path) -> None:
    proc = bake("build", cwd=tmp_path, env={"GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert proc.returncode == 4, proc.stderr
    assert "cd into one" in proc.stderr and "pass the work tree's path" not in proc.stderr

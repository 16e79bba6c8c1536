"""``bake pin``'s parser and the checks it makes before asking any registry (bake/commands/pin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.cli import build_parser
from bake.commands import pin
from tests.runners import bake


def test_its_parser_takes_dockerfiles_and_writes_by_default() -> None:
    args = build_parser().parse_args(["pin", "--repository", "r.example/x", "a/Dockerfile", "b/Dockerfile"])
    assert args.dockerfiles == [Path("a/Dockerfile"), Path("b/Dockerfile")]
    assert (args.check, args.runtime, args.group, args.verify_key, args.no_tlog) == (
        False,
        False,
        [],
        None,
        False,
    )
    assert args.run is pin.cmd_pin


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["--manifest", "m.toml"], "bake publish --manifest m.toml --repository r.example/x"),
        (
            ["--manifest", "my assets.toml", "--group", "a", "--group", "b"],
            "bake publish --manifest 'my assets.toml' --repository r.example/x --group a --group b",
        ),
        (["--runtime"], "bake publish --runtime --repository r.example/x"),
    ],
    ids=["a manifest", "groups and a space", "the runtime"],
)
def test_the_publish_line_it_names_is_the_one_that_makes_the_image(argv: list[str], command: str) -> None:
    args = build_parser().parse_args(["pin", "--repository", "r.example/x", *argv, "Dockerfile"])
    assert pin._publish_command(args) == command


@pytest.mark.parametrize("extra", [["--group", "g"], ["--manifest", "m.toml"]], ids=["group", "manifest"])
def test_the_runtime_with_a_selection_exits_2_before_any_registry(tmp_path: Path, extra: list[str]) -> None:
    (tmp_path / "Dockerfile").write_text("FROM r.example/x:latest\n")
    proc = bake("pin", "--runtime", *extra, "--repository", "r.example/x", "Dockerfile", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--runtime names bake's runtime image: it takes no --manifest or --group" in proc.stderr
    assert (tmp_path / "Dockerfile").read_text() == "FROM r.example/x:latest\n"


def test_without_a_dockerfile_it_exits_2(tmp_path: Path) -> None:
    proc = bake("pin", "--repository", "r.example/x", cwd=tmp_path)
    assert proc.returncode == 2 and "DOCKERFILE" in proc.stderr, proc.stderr

"""``bake publish``: the options it refuses before any build, and the install line it names when a
registry asks for a login without the docker SDK (bake/commands/publish.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.cli import build_parser
from bake.commands import publish
from tests.commands.conftest import DECLARED
from tests.registries import AuthRegistry
from tests.runners import bake


@pytest.mark.docker
def test_publish_without_the_docker_sdk_exits_2_with_the_line_that_installs_it(
    tmp_path: Path, auth_registry: AuthRegistry
) -> None:
    """bake asks the registry itself; the docker SDK only reads `docker login`'s credentials. A registry
    that asks for a login where the SDK is missing is an install to make (exit 2), named with its line."""
    import subprocess
    import sys

    from tests.runners import cli_env

    manifest = tmp_path / "assets.toml"
    manifest.write_text(DECLARED)
    code = "import sys; sys.modules['docker'] = None; from bake.cli import main; sys.exit(main(sys.argv[1:]))"
    for argv in (["publish", "--manifest", str(manifest)], ["publish", "--runtime"]):
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv, "--repository", f"{auth_registry.host}/bake-test-x"],
            env=cli_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert "asks for a login" in proc.stderr, proc.stderr
        assert f"{sys.executable} -m pip install 'docker>=7'" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "bake-assets[registry]" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("extra", [["--group", "g"], ["--manifest", "m.toml"]], ids=["group", "manifest"])
def test_the_runtime_with_a_selection_exits_2_before_any_build(tmp_path: Path, extra: list[str]) -> None:
    proc = bake("publish", "--runtime", *extra, "--repository", "127.0.0.1:5000/x", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--runtime names bake's runtime image: it takes no --manifest or --group" in proc.stderr


def test_its_parser_hands_the_words_after_the_double_dash_to_buildx() -> None:
    argv = ["publish", "--repository", "r.example/x", "--", "--platform", "linux/arm64"]
    args = build_parser().parse_args(argv)
    assert args.buildx_args == ["--", "--platform", "linux/arm64"]
    assert (args.runtime, args.sign, args.no_tlog, args.manifest) == (False, None, False, None)
    assert args.run is publish.cmd_publish

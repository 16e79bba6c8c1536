"""Messages that used to send users the wrong way (issue 17's list): each now names what is true.

``bake doctor`` suggested options it does not have; ``bake build`` outside git suggested a path
it does not take; ``manifest check`` said "none is declared" beside a declared consumer;
``--dst`` was reported only as "--dest required".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.registries import AuthRegistry
from tests.runners import bake

DECLARED = """\
[[consumer]]
name = "whisper"
locations = ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]

[[asset]]
name = "base"
path = "whisper/base.pt"
sha256 = "%s"
urls = ["https://example.org/base.pt"]
""" % ("0" * 64)


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


def test_manifest_check_names_the_declared_consumer(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(DECLARED)
    proc = bake("manifest", "check", "--manifest", str(manifest), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Nothing was judged: a warning on stderr, no result on stdout.
    assert "none is declared" not in proc.stderr and not proc.stdout
    assert "the declared consumer(s) whisper carry no table" in proc.stderr


def test_doctor_without_a_lock_names_its_own_option(tmp_path: Path) -> None:
    proc = bake("doctor", "--assets", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "point --assets (or BAKE_ASSETS) at a baked asset root" in proc.stderr
    assert "--manifest" not in proc.stderr and "--dest" not in proc.stderr


# -- issue 37's small ones ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["fetch", "--dest", "d"],
        ["seal", "--dest", "d"],
        ["manifest", "digest"],
        ["publish", "--repository", "127.0.0.1:5000/x"],
        ["add", "file:///x.bin", "--path", "d/x.bin"],
    ],
    ids=lambda argv: argv[0],
)
def test_the_default_manifest_s_absence_is_explained(argv: list[str], tmp_path: Path) -> None:
    proc = bake(*argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.count("bake: error:") == 1 and "docker/assets.toml" in line, line
    assert "no --manifest given" in line and "BAKE_MANIFEST" in line and str(tmp_path) in line, line


def test_add_with_a_path_suggests_its_file_url(tmp_path: Path) -> None:
    source = tmp_path / "model.bin"
    source.write_bytes(b"a model")
    proc = bake("add", str(source), "--path", "d/model.bin", "--manifest", tmp_path / "m.toml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"for a local file write file://{source}" in proc.stderr, proc.stderr


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

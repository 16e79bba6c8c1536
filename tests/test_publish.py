"""``bake publish`` on the real engine and registry: built once, then only answered; one stdout line.

Each test publishes into a repository of its own on the toolchain's registry (127.0.0.1:5000),
from a directory that is not a bake checkout, with a small manifest served by a loopback mirror.
The wheel-installed run (a fresh venv, no checkout at all) is in tests/test_release.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake import __version__
from bake.assets_image import registry_digest
from bake.publish import context_files, runtime_tag, selection_of
from bake.testing.image import ImageUnderTest
from tests.assets import mirror_args
from tests.baked import FILES, VOCAB_PATH, sha256, write_manifest
from tests.baked import serve as serve_files
from tests.mirror import Mirror
from tests.registries import REGISTRY, AnsweringRegistry, free_port, push_one_layer, remove_images_named
from tests.runners import REPO

pytestmark = pytest.mark.docker

STANDIN = "local/rocm-standin:bookworm"
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]
PINNED = re.compile(r"(?P<ref>(?P<repo>[^\s@]+):(?P<tag>[A-Za-z0-9_.-]+))@(?P<digest>sha256:[0-9a-f]{64})")


def bake_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m bake ARGS`` from ``cwd`` (this checkout on PYTHONPATH), with a build's patience."""
    return subprocess.run(
        [sys.executable, "-m", "bake", *args], cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, engine: None) -> Iterator[tuple[Path, dict[str, str]]]:
    """A directory outside any checkout holding a manifest, and the environment that fetches from a mirror."""
    workdir = tmp_path_factory.mktemp("site")
    manifest = write_manifest(workdir / "assets.toml")
    with Mirror() as mirror:
        serve_files(mirror)
        env = {
            "ASSET_MIRRORS": " ".join(mirror_args(mirror.url("/").rstrip("/"))),
            "BAKE_FETCH_ARGS": "--no-origin",
            "FETCH_IMAGE": STANDIN,
        }
        yield manifest, env


# Every repository this module publishes to names RUN; the engine's copies go at the end.
RUN = f"publish-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module", autouse=True)
def _clear_engine() -> Iterator[None]:
    yield
    remove_images_named(RUN)


@pytest.fixture
def repository() -> str:
    return f"{REGISTRY}/bake-test/{RUN}-{uuid.uuid4().hex[:6]}"


def only_line(proc: subprocess.CompletedProcess[str]) -> re.Match[str]:
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"expected exactly one stdout line, got {lines}"
    match = PINNED.fullmatch(lines[0])
    assert match, lines[0]
    return match


def block_lines(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, re.Match[str]]]:
    """``publish``'s stdout: (kind and unit name, the pinned reference) per line."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = []
    for line in proc.stdout.splitlines():
        *kind, ref = line.split(" ")
        match = PINNED.fullmatch(ref)
        assert match and kind[0] in ("unit", "index", "image"), line
        lines.append((" ".join(kind), match))
    return lines


def test_publish_builds_once_and_prints_one_line_per_unit_the_index_and_the_image(
    site: tuple[Path, dict[str, str]], repository: str
) -> None:
    manifest, env = site
    cwd = manifest.parent
    digest = bake_cli("manifest", "digest", "--manifest", str(manifest), "--group", "vllm", cwd=cwd, env=env)
    selection = ["--manifest", str(manifest), "--repository", repository, "--group", "vllm"]

    first = block_lines(bake_cli("publish", *selection, *HOST_NETWORK, cwd=cwd, env=env))
    # --group vllm: the vocab alone, one unit.
    assert [kind for kind, _ in first] == ["unit asset.o200k_base", "index", "image"]
    unit, index, whole = (match for _, match in first)
    assert unit["tag"].startswith("unit-asset.o200k_base-") and unit["repo"] == repository
    assert (index["tag"], whole["tag"]) == (f"index-{digest.stdout.strip()}", digest.stdout.strip())

    again = bake_cli("publish", *selection, cwd=cwd, env=env)
    assert [m.group() for _, m in block_lines(again)] == [m.group() for _, m in first]
    assert "nothing to build" in again.stderr and "docker buildx build" not in again.stderr

    image = ImageUnderTest(whole.group())
    lock = json.loads(image.read_file("/opt/bake/assets/bake.lock.json"))
    assert lock["manifest_digest"] == whole["tag"]
    # --group vllm: the vocab only, as the registry's copy holds it.
    assert [(e["path"], e["sha256"]) for e in lock["assets"]] == [(VOCAB_PATH, sha256(FILES[VOCAB_PATH]))]
    assert len(image.attrs["RootFS"]["Layers"]) == 2, "the whole image is the unit's layer and the index's"
    assert len(ImageUnderTest(unit.group()).attrs["RootFS"]["Layers"]) == 1


def test_publish_runtime_tags_bake_and_holds_the_runtime(
    site: tuple[Path, dict[str, str]], repository: str
) -> None:
    _, env = site
    cwd = site[0].parent
    published = only_line(
        bake_cli("publish", "--runtime", "--repository", repository, *HOST_NETWORK, cwd=cwd, env=env)
    )
    assert published["repo"] == repository
    assert re.fullmatch(rf"{re.escape(__version__)}-[0-9a-f]{{12}}", published["tag"]), published["tag"]
    image = ImageUnderTest(published.group())
    for path in ("/usr/local/bin/tini", "/usr/local/bin/bake-entrypoint", "/usr/local/bin/bake"):
        assert image.read_file(path), f"{path} missing from the runtime image"
    assert image.read_file("/opt/bake/lib/bake/__init__.py") == (REPO / "bake/__init__.py").read_bytes()
    again = bake_cli("publish", "--runtime", "--repository", repository, cwd=cwd, env=env)
    assert only_line(again).group() == published.group() and "nothing to build" in again.stderr


def test_a_registry_without_a_definite_answer_is_exit_5_and_nothing_is_built(
    site: tuple[Path, dict[str, str]],
) -> None:
    manifest, env = site
    with AnsweringRegistry(503) as registry:
        answering = f"{registry.host}/bake-assets"
        refused = bake_cli(
            "publish", "--manifest", str(manifest), "--repository", answering, cwd=manifest.parent, env=env
        )
    silent = f"127.0.0.1:{free_port()}/bake-assets"
    unreachable = bake_cli(
        "publish", "--manifest", str(manifest), "--repository", silent, cwd=manifest.parent, env=env
    )
    for proc, repo in ((refused, answering), (unreachable, silent)):
        assert proc.returncode == 5, proc.stderr
        assert proc.stdout == "" and f"{repo}:" in proc.stderr and "Traceback" not in proc.stderr
        assert "docker buildx build" not in proc.stderr, "nothing may be built on a guess"


def test_a_failed_build_is_exit_5_and_nothing_is_pushed(
    site: tuple[Path, dict[str, str]], repository: str
) -> None:
    manifest, env = site
    broken = manifest.with_name("broken.toml")
    # The mirror serves other bytes than this hash: the fetch stage fails, so nothing may be pushed.
    broken.write_text(manifest.read_text().replace(sha256(FILES[VOCAB_PATH]), "0" * 64))
    proc = bake_cli(
        "publish",
        "--manifest",
        str(broken),
        "--repository",
        repository,
        *HOST_NETWORK,
        cwd=manifest.parent,
        env=env,
    )
    assert proc.returncode == 5, proc.stderr[-3000:]
    assert "failed" in proc.stderr and "nothing was pushed" in proc.stderr and proc.stdout == ""
    assert "bake: pushed" not in proc.stderr
    tag = bake_cli(
        "manifest", "digest", "--manifest", str(broken), cwd=manifest.parent, env=env
    ).stdout.strip()
    assert registry_digest(f"{repository}:{tag}") is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--runtime", "--group", "vllm", "--repository", "r.example/x"], "takes no --manifest or --group"),
        (["--manifest", "missing.toml", "--repository", "r.example/x"], "missing.toml"),
        (["--manifest", "assets.toml", "--repository", "r.example/x:v1"], "without a tag or digest"),
    ],
    ids=["runtime with a group", "missing manifest", "tagged repository"],
)
def test_usage_errors_are_exit_2_before_the_registry_is_asked(
    site: tuple[Path, dict[str, str]], args: list[str], says: str
) -> None:
    manifest, env = site
    proc = bake_cli(
        "publish", *args, cwd=manifest.parent, env={**env, "DOCKER_HOST": "unix:///nonexistent.sock"}
    )
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_the_runtime_tag_changes_with_any_byte_of_bake(tmp_path: Path) -> None:
    files = context_files()
    assert {"docker/Dockerfile", "scripts/entrypoint.sh", "bake/cli.py"} <= files.keys()
    assert not [name for name in files if "publish_files" in name or "__pycache__" in name]
    changed = tmp_path / "cli.py"
    changed.write_bytes(files["bake/cli.py"].read_bytes() + b"\n")
    assert runtime_tag(files) != runtime_tag({**files, "bake/cli.py": changed})
    assert runtime_tag(files) == runtime_tag(dict(reversed(files.items())))


def test_no_engine_is_a_named_failure(site: tuple[Path, dict[str, str]]) -> None:
    manifest, env = site
    repo = f"{REGISTRY}/bake-test/{RUN}-never"
    proc = bake_cli(
        "publish", "--manifest", str(manifest), "--repository", repo,
        cwd=manifest.parent, env={**env, "DOCKER_HOST": "unix:///nonexistent.sock"},
    )  # fmt: skip
    # The registry is asked directly (it lacks the images); the build is what needs the engine.
    assert proc.returncode == 5 and "Cannot connect to the Docker daemon" in proc.stderr, proc.stderr
    assert f"building {repo}:" in proc.stderr and "nothing was pushed" in proc.stderr


def test_a_unit_someone_pushed_first_is_exit_5_and_nothing_else_is_pushed(
    site: tuple[Path, dict[str, str]], repository: str
) -> None:
    manifest, env = site
    chosen = selection_of(manifest, repository, ["vllm"])
    unit = chosen.unit_ref(chosen.units[0])
    served = push_one_layer(unit, VOCAB_PATH, b"other bytes under the vocab's unit tag\n")
    selection = ["--manifest", str(manifest), "--repository", repository, "--group", "vllm"]
    proc = bake_cli("publish", *selection, *HOST_NETWORK, cwd=manifest.parent, env=env)
    assert proc.returncode == 5 and proc.stdout == "", proc.stderr[-3000:]
    assert (
        f"{unit}: expected 1 layer, diff ID sha256:" in proc.stderr and "(the tree bake built)" in proc.stderr
    )
    assert f"served {served}" in proc.stderr and "Traceback" not in proc.stderr
    assert registry_digest(chosen.index_ref) is None and registry_digest(chosen.whole_ref) is None
    assert registry_digest(unit) == served, "the tag keeps what was there: bake overwrites nothing"

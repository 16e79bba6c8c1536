"""``bake build``: the check gates the build, bake's failures map to 5, exports reach BuildKit intact."""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from bake.build import run_build
from bake.context import export_context
from bake.errors import BuildError, ContextDirty, GitError
from tests.isolation import isolate_git
from tests.runners import bake, git, sh


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_git(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed build context: a Dockerfile, a bake file, a script (0755) and a unique nonce."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "Dockerfile").write_text("FROM scratch\nCOPY . /ctx\n")
    (root / "docker-bake.hcl").write_text('target "default" {\n  context = "."\n}\n')
    (root / ".dockerignore").write_text(".git\nout\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "src" / "app.py").write_text("print('app')\n")
    # A fresh nonce per test, so a first build can never be a cache hit from an earlier run.
    (root / "nonce").write_text(f"{uuid.uuid4()}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Put a `docker` first on PATH that records argv, cwd and the exported context, then runs ACTION."""
    bin_dir = tmp_path / "fake-bin"
    record = tmp_path / "record"
    bin_dir.mkdir()
    record.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def install(action: str = "exit 0") -> Path:
        script = bin_dir / "docker"
        script.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\0' \"$@\" > '{record}/argv'\n"
            f"pwd > '{record}/cwd'\n"
            'for a; do case "$a" in'
            f" '*.context='*) cp -Rp \"${{a#'*.context='}}\" '{record}/context';; esac; done\n"
            f"{action}\n"
        )
        script.chmod(0o755)
        return record

    return install


def recorded_argv(record: Path) -> list[str]:
    return (record / "argv").read_text().split("\0")[:-1]


def head_files(repo: Path) -> dict[str, bytes]:
    names = filter(None, git(repo, "ls-tree", "-r", "-z", "--name-only", "HEAD").split(b"\0"))
    return {os.fsdecode(n): git(repo, "show", f"HEAD:{os.fsdecode(n)}") for n in names}


def tree_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def tree_modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


# ---- the wrapper, with a fake docker ---------------------------------------------------------------

# (script, strict, error, whether --export still refuses: it builds HEAD's tree, so uncommitted
# tracked changes cannot reach it and are only a warning; --strict and git failures still refuse)
FAILED_CHECKS = {
    "content edit": ("echo x >> run.sh", False, ContextDirty, False),
    "staged deletion": ("git rm -q src/app.py", False, ContextDirty, False),
    "content edit with strict": ("echo x >> run.sh", True, ContextDirty, True),
    "untracked file with strict": ("echo x > stray.txt", True, ContextDirty, True),
    "not a repository": ("rm -rf .git", False, GitError, True),
    "corrupt index": ("head -c 64 /dev/urandom > .git/index", False, GitError, True),
}


REFUSALS = [
    pytest.param(script, strict, error, export, id=f"{name}, {'export' if export else 'in place'}")
    for name, (script, strict, error, export_refuses) in FAILED_CHECKS.items()
    for export in (False, True)
    if export_refuses or not export
]


@pytest.mark.parametrize(("script", "strict", "error", "export"), REFUSALS)
def test_failed_check_never_runs_bake(
    repo: Path,
    fake_docker: Callable[[str], Path],
    script: str,
    strict: bool,
    error: type[Exception],
    export: bool,
) -> None:
    record = fake_docker("exit 0")
    sh(repo, script)
    with pytest.raises(error):
        run_build(repo, ["default"], export=export, strict=strict)
    assert not (record / "argv").exists()


def test_dirty_refusal_says_how_to_proceed(repo: Path, fake_docker: Callable[[str], Path]) -> None:
    fake_docker("exit 0")
    sh(repo, "echo x >> run.sh")
    with pytest.raises(ContextDirty) as caught:
        run_build(repo, ["default"])
    reason = str(caught.value).splitlines()[0]
    assert "Commit" in reason and "`bake build --export` to build HEAD's tree" in reason
    assert "M\trun.sh" in str(caught.value).splitlines()


def test_export_builds_head_over_edits(
    repo: Path, fake_docker: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    record = fake_docker("exit 0")
    sh(repo, "echo edited >> run.sh && git rm -q src/app.py")
    with caplog.at_level(logging.WARNING, logger="bake.build"):
        assert run_build(repo, ["default"], export=True) == 0
    assert tree_files(record / "context") == head_files(repo)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "run.sh" in warning and "src/app.py" in warning and "not in the build" in warning


BAKE_FAILURES = {
    "exit 1": ("exit 1", "exit 1"),
    "exit 17": ("exit 17", "exit 17"),
    "killed by SIGTERM": ("kill -TERM $$", "killed by SIGTERM"),
}


@pytest.mark.parametrize(("action", "how"), BAKE_FAILURES.values(), ids=BAKE_FAILURES.keys())
def test_failed_build_maps_to_5_with_bakes_exit(
    repo: Path, fake_docker: Callable[[str], Path], action: str, how: str
) -> None:
    record = fake_docker(action)
    with pytest.raises(BuildError) as caught:
        run_build(repo, ["default"])
    assert caught.value.exit_code == 5
    assert f"({how})" in str(caught.value)
    assert recorded_argv(record) == ["buildx", "bake", "default"]


ODD_ARGS = [
    "-f",
    "docker-bake.hcl",
    "--set",
    "*.args.NOTE=two words",
    "--print",
    "target one",
    "ünï",
    "--",
    "",
]


@pytest.mark.parametrize("subdir", ["", "src"], ids=["top level", "subdirectory"])
def test_success_passes_args_verbatim(repo: Path, fake_docker: Callable[[str], Path], subdir: str) -> None:
    record = fake_docker("exit 0")
    assert run_build(repo / subdir, ODD_ARGS) == 0
    assert recorded_argv(record) == ["buildx", "bake", *ODD_ARGS]
    assert Path((record / "cwd").read_text().strip()) == repo / subdir


def test_export_points_every_target_at_heads_tree(repo: Path, fake_docker: Callable[[str], Path]) -> None:
    record = fake_docker("exit 0")
    sh(repo, "chmod -x run.sh && chmod +x Dockerfile && chmod 700 src && echo x > stray.txt")
    assert run_build(repo, ["default"], export=True) == 0
    argv = recorded_argv(record)
    exported = argv[3].removeprefix("*.context=")
    assert argv == [
        "buildx",
        "bake",
        "--set",
        f"*.context={exported}",
        f"--allow=fs.read={exported}",
        "default",
    ]
    assert tree_files(record / "context") == head_files(repo)
    assert tree_modes(record / "context")["run.sh"] == 0o755
    assert tree_modes(record / "context")["Dockerfile"] == 0o644
    assert tree_modes(record / "context")["src"] == 0o755
    assert not Path(exported).exists()


@pytest.mark.parametrize(("export", "warnings"), [(False, 1), (True, 0)], ids=["in place", "export"])
def test_untracked_files_warn_only_when_they_reach_the_context(
    repo: Path,
    fake_docker: Callable[[str], Path],
    caplog: pytest.LogCaptureFixture,
    export: bool,
    warnings: int,
) -> None:
    fake_docker("exit 0")
    (repo / "stray.txt").write_text("x")
    with caplog.at_level(logging.WARNING, logger="bake.build"):
        run_build(repo, [], export=export)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == warnings
    assert all("1 untracked file(s)" in w and w.endswith(": stray.txt") for w in warned)


def test_docker_missing_is_a_build_error(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    only_git = tmp_path / "only-git"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git") or "git")
    monkeypatch.setenv("PATH", str(only_git))
    with pytest.raises(BuildError, match="cannot run `docker buildx bake`") as caught:
        run_build(repo, ["default"])
    assert caught.value.exit_code == 5


CLI = {
    "success": ("", "exit 0", 0, ""),
    "dirty context": ("echo x >> run.sh", "exit 0", 1, "M\trun.sh"),
    "dirty context, the way forward": ("echo x >> run.sh", "exit 0", 1, "or run `bake build --export`"),
    "corrupt index": ("head -c 64 /dev/urandom > .git/index", "exit 0", 4, "index check failed"),
    "bake fails": ("", "exit 3", 5, "(exit 3)"),
}


@pytest.mark.parametrize(("script", "action", "code", "stderr"), CLI.values(), ids=CLI.keys())
def test_cli_exit_codes(
    repo: Path, fake_docker: Callable[[str], Path], script: str, action: str, code: int, stderr: str
) -> None:
    record = fake_docker(action)
    if script:
        sh(repo, script)
    result = bake("build", "--", "--print", "default", cwd=repo)
    assert result.returncode == code, result.stderr
    assert stderr in result.stderr
    assert (record / "argv").exists() == (code in (0, 5))


# ---- a real Docker engine ---------------------------------------------------------------------------


@pytest.fixture
def docker_engine() -> None:
    """Skip without a Docker engine and its CLI (bake runs buildx), but fail when CI=true."""
    try:
        docker.from_env(timeout=30).ping()
        reason = "" if shutil.which("docker") else "no docker CLI on PATH for `docker buildx bake`"
    except docker.errors.DockerException as exc:
        reason = f"no Docker engine answers ({exc})"
    if not reason:
        return
    reason += "; start one with `scripts/toolchain.sh up`"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def buildkit(context: Path) -> str:
    """Build CONTEXT's Dockerfile with no network and no output; return BuildKit's plain log."""
    build = [
        "docker",
        "buildx",
        "build",
        "--network",
        "none",
        "--progress",
        "plain",
        "--output",
        "type=cacheonly",
    ]
    result = subprocess.run([*build, str(context)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stderr


def copy_cached(log: str) -> bool:
    step = re.search(r"^#(\d+) \[\d+/\d+\] COPY \. /ctx$", log, re.MULTILINE)
    assert step, log
    return re.search(rf"^#{step.group(1)} CACHED$", log, re.MULTILINE) is not None


@pytest.mark.docker
def test_workspaces_differing_only_in_modes_hit_the_buildkit_cache(
    docker_engine: None, repo: Path, tmp_path: Path
) -> None:
    drifted = tmp_path / "drifted"
    git(tmp_path, "clone", "-q", str(repo), str(drifted))
    sh(drifted, "chmod -x run.sh && chmod +x Dockerfile nonce src/app.py && chmod 700 src")
    old = os.umask(0o077)
    try:
        exports = [export_context(ws, tmp_path / f"ctx-{ws.name}") for ws in (repo, drifted)]
    finally:
        os.umask(old)

    assert not copy_cached(buildkit(exports[0]))
    assert copy_cached(buildkit(exports[1]))
    # The control: the drifted workspace itself, same content, differs from the exports only in modes.
    assert not copy_cached(buildkit(drifted))


@pytest.mark.docker
def test_bake_builds_from_the_export(docker_engine: None, repo: Path) -> None:
    sh(repo, "chmod -x run.sh && echo only-here > stray.txt")
    output = ["--progress", "plain", "--set", "*.output=type=local,dest=out"]
    assert run_build(repo, output, export=True) == 0
    assert tree_files(repo / "out" / "ctx") == head_files(repo)
    assert tree_modes(repo / "out" / "ctx")["run.sh"] == 0o755


@pytest.mark.docker
def test_real_bake_failure_maps_to_5(docker_engine: None, repo: Path) -> None:
    (repo / "Dockerfile").write_text("FROM scratch\nCOPY missing.txt /\n")
    git(repo, "commit", "-q", "-am", "broken Dockerfile")
    with pytest.raises(BuildError, match=r"\(exit 1\)"):
        run_build(repo, ["--progress", "plain", "--set", "*.output=type=cacheonly"], export=True)

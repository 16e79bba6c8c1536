"""Native pods (Docker off, as vLLM's MI300 jobs run): a runner exports per-job XDG_CACHE_HOME and
TMPDIR, then runs the runner line (tests.pod.SNIPPET), then the job finds every baked file where
its consumer looks. On the host, under dash and busybox sh, with an asset directory made by
``bake fetch`` and ``bake seal`` as a build makes it.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.baked import DECLARED, FILES, serve, sha256, write_manifest
from tests.isolation import NETWORK_ENV
from tests.mirror import Mirror
from tests.pod import (
    REPO,
    RUNNER,
    RUNNER_TOO_EARLY,
    SNIPPET,
    expectations,
    install_entrypoint,
    run_pod,
)
from tests.runners import bake
from tests.serve import SHELLS, Shell, resolved

EXPECTED = expectations({rel: sha256(data) for rel, data in FILES.items()}, DECLARED)


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A sealed asset directory: the generated files fetched from a loopback mirror, then sealed."""
    root = tmp_path_factory.mktemp("baked")
    manifest = write_manifest(root / "assets.toml")
    env = dict.fromkeys(NETWORK_ENV, "")
    with Mirror() as mirror:
        fetch = bake(
            "fetch", "--manifest", str(manifest), "--dest", str(root / "assets"),
            "--cache-dir", str(root / "cache"), "--quiet", *serve(mirror), env=env,
        )  # fmt: skip
    assert fetch.returncode == 0, fetch.stderr
    seal = bake("seal", "--manifest", str(manifest), "--dest", str(root / "assets"))
    assert seal.returncode == 0, seal.stderr
    yield root / "assets"
    for path in (root / "assets").rglob("*"):  # seal made it read-only; let pytest clean up
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    (root / "assets").chmod(0o755)


@pytest.fixture(params=SHELLS, ids=lambda s: s.name)
def shell(request: pytest.FixtureRequest) -> Shell:
    return resolved(request.param)


def _pod(shell: Shell, assets: Path, tmp_path: Path, job: str, **kwargs) -> object:
    return run_pod(
        shell,
        bin_dir=install_entrypoint(tmp_path / "bin", shell),
        assets=assets,
        job_dir=tmp_path / job,
        home=tmp_path / "home",
        expected=EXPECTED,
        python=sys.executable,
        **kwargs,
    )


def test_the_runner_and_the_docs_carry_the_exact_snippet() -> None:
    assert SNIPPET in RUNNER.read_text().splitlines()
    assert SNIPPET in (REPO / "docs" / "runtime.md").read_text()


def test_every_consumer_location_is_served_in_a_per_job_cache(
    shell: Shell, assets: Path, tmp_path: Path
) -> None:
    pod = _pod(shell, assets, tmp_path, "job-1")
    assert pod.returncode == 0, pod.stderr
    where = {name: loc["path"] for name, loc in pod.report["locations"].items()}
    job = tmp_path / "job-1"
    assert where["s3tokenizer"] == str(job / "cache" / "s3tokenizer")
    (whisper,) = DECLARED["whisper"]
    assert where[whisper] == str(job / "cache" / "whisper")
    # Unset TIKTOKEN_* are exported job-local, under the TMPDIR the runner exported first.
    for name in ("tiktoken-rs", "tiktoken"):
        assert where[name].startswith(str(job / "tmp") + "/"), where
        assert pod.report["env"][
            {"tiktoken-rs": "TIKTOKEN_RS_CACHE_DIR", "tiktoken": "TIKTOKEN_CACHE_DIR"}[name]
        ]


def test_each_job_is_served_again_after_the_last_one_was_thrown_away(
    shell: Shell, assets: Path, tmp_path: Path
) -> None:
    first = _pod(shell, assets, tmp_path, "job-1")
    assert first.returncode == 0, first.stderr
    for path in sorted((tmp_path / "job-1").rglob("*"), reverse=True):  # the pod wipes job dirs
        path.unlink() if path.is_symlink() or not path.is_dir() else path.rmdir()
    second = _pod(shell, assets, tmp_path, "job-2")
    assert second.returncode == 0, second.stderr
    assert second.report["locations"]["s3tokenizer"]["path"].startswith(str(tmp_path / "job-2"))


def test_the_snippet_before_the_exports_leaves_the_job_unserved(
    shell: Shell, assets: Path, tmp_path: Path
) -> None:
    """The control: the job really checks the per-job location, so the order in runner.sh matters."""
    pod = _pod(shell, assets, tmp_path, "job-1", runner=RUNNER_TOO_EARLY)
    assert pod.returncode == 1
    assert f"{tmp_path / 'job-1' / 'cache' / 's3tokenizer'}/speech_tokenizer_v3_25hz.onnx" in pod.stderr


def test_a_node_cache_set_by_the_runner_keeps_its_bytes_and_gains_no_link(
    shell: Shell, assets: Path, tmp_path: Path
) -> None:
    """vLLM's runner points TIKTOKEN_RS_CACHE_DIR into the persistent HF_HOME: data bake must not break."""
    node = tmp_path / "node" / "huggingface" / "tiktoken-rs-cache"
    node.mkdir(parents=True)
    other = node / ("0" * 40)
    other.write_bytes(b"another vocab, cached by an earlier job\n")
    before = other.read_bytes()
    pod = _pod(shell, assets, tmp_path, "job-1", env={"TIKTOKEN_RS_CACHE_DIR": str(node)})
    assert pod.returncode == 0, pod.stderr
    assert other.read_bytes() == before
    links = [p.name for p in node.iterdir() if stat.S_ISLNK(os.lstat(p).st_mode)]
    assert links == [], f"{node} gained links into the asset directory: {links}"

"""bake.testing as a whole without an engine: ``--bake-local`` on a sealed asset directory, after the
runner's line (or without it). Its modules' own tests are in tests/testing/."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.assets import O200K_URL

REPO = Path(__file__).resolve().parents[1]


# ---- --bake-local: the running system, after the runner's line, on a sealed asset directory -----

# The runner's line, verbatim as docs/vllm.md gives it: it carries bake-entrypoint's exit status.
RUNNER_LINE = 'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
LOCAL_FILES = {
    "s3tokenizer/speech_tokenizer_v3_25hz.onnx": b"checkpoint bytes " * 512,
    "tiktoken/" + hashlib.sha1(O200K_URL.encode()).hexdigest(): b"vocab bytes " * 256,
}
LOCAL_PLUGIN = "-p no:cacheprovider --pyargs bake.testing --bake-local -rs -v"
# Checks that need an image: each reported as not applicable, with the reason, never skipped silently.
IMAGE_ONLY = {
    "test_manifest_digest_label": "no image labels in --bake-local mode",
    "test_tini_is_pid_1_and_sigterm_reaches_the_job": "the runner bypasses the ENTRYPOINT",
    "test_secret_pattern_is_in_no_layer[pattern-1]": "no image layers in --bake-local mode",
}


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An asset directory as the image holds it: `bake fetch` from file:// sources, then `bake seal`."""
    work = tmp_path_factory.mktemp("sealed")
    entries = []
    for path, data in LOCAL_FILES.items():
        source = work / "sources" / path.replace("/", "_")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(data)
        origin = O200K_URL if path.startswith("tiktoken/") else "https://www.modelscope.cn/m.onnx"
        entries.append(
            f'[[asset]]\nname = "{path.split("/")[0]}"\npath = "{path}"\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n'
            f'urls = ["{source.as_uri()}", "{origin}"]\n'
        )
    manifest = work / "assets.toml"
    manifest.write_text("\n".join(entries))
    dest = work / "assets"
    bake = [sys.executable, "-m", "bake"]
    for args in (["fetch", "--cache-dir", str(work / "cache")], ["seal"]):
        subprocess.run(
            [*bake, args[0], "--manifest", str(manifest), "--dest", str(dest), *args[1:]],
            check=True, capture_output=True, timeout=120, cwd=REPO,
        )  # fmt: skip
    return dest


def local_job(tmp_path: Path, sealed: Path, *pytest_args: str, runner_line: bool = True):
    """A native job's shell: its fresh job directories, then (or not) the runner's line, then the plugin."""
    job = tmp_path / "job"
    script = "\n".join([
        "set -eu",
        f'export BAKE_ASSETS="{sealed}" HOME="{job}/home" TMPDIR="{job}/tmp" XDG_CACHE_HOME="{job}/xdg"',
        'mkdir -p "$HOME" "$TMPDIR" "$XDG_CACHE_HOME"',
        RUNNER_LINE if runner_line else ":",
        f'exec "{sys.executable}" -m pytest {LOCAL_PLUGIN} "$@"',
    ])  # fmt: skip
    path = f"{REPO / 'scripts'}{os.pathsep}{os.environ.get('PATH', '')}"
    clean = {k: v for k, v in os.environ.items() if k not in ("BAKE_IMAGE", "BAKE_ASSETS")}
    return subprocess.run(
        ["sh", "-c", script, "sh", *pytest_args], cwd=tmp_path, env={**clean, "PATH": path},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.timeout(300)
def test_local_mode_passes_after_the_runner_line_and_names_what_does_not_apply(
    sealed: Path, tmp_path: Path
) -> None:
    # doctor is deselected: this venv's consumer libraries expect the production files' hashes.
    proc = local_job(tmp_path, sealed, "-k", "not test_doctor", "--bake-secret-pattern", "hf_x")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    for path in LOCAL_FILES:
        assert f"test_asset[{path}] PASSED" in proc.stdout, proc.stdout[-6000:]
    assert proc.stdout.count("test_location_is_served[") >= 3 and "FAILED" not in proc.stdout
    summary = proc.stdout.split("bake.testing: not applicable", 1)[-1]
    for test, reason in IMAGE_ONLY.items():
        assert f"{test}: {reason}" in summary, summary[-4000:]


@pytest.mark.timeout(300)
def test_local_mode_without_the_runner_line_fails_naming_it(sealed: Path, tmp_path: Path) -> None:
    proc = local_job(tmp_path, sealed, "-k", "location", runner_line=False)
    assert proc.returncode == 1, proc.stdout[-6000:]
    assert "$TIKTOKEN_RS_CACHE_DIR is unset in the job" in proc.stdout
    assert RUNNER_LINE in proc.stdout, proc.stdout[-4000:]

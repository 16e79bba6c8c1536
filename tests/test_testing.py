"""bake.testing without an engine: bake.serve parsing, the streaming secret scan, the usage error."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bake.testing.layers import CHUNK, scan_archive
from bake.testing.serve import ServeError, legacy_serve, parse_serve
from tests.assets import O200K_URL

REPO = Path(__file__).resolve().parents[1]

SUM = "0" * 64
SERVE = (
    "# bake serve v1\n"
    "loc\ts3tokenizer.0\ts3tokenizer\tunder\tXDG_CACHE_HOME\ts3tokenizer\t$HOME/.cache\n"
    "loc\thub.xdg\t-\tunder\tXDG_CACHE_HOME\thuggingface\t$HOME/.cache\n"
    "loc\thub.0\thub\tunder\tHF_HUB_CACHE\t\t@hub.xdg\n"
    f"set\ts3tokenizer\t{SUM}\t12\t.bake\ts3tokenizer\ts3tokenizer/m.onnx\n"
    f"set\thub\t{SUM}\t3\t.locks/.bake\thub\thub/models--o--r\n"
    "dir\ts3tokenizer\tboth\t.\n"
    "place\ts3tokenizer\tlink\ts3tokenizer/m.onnx\tm.onnx\n"
    f"file\ts3tokenizer\tboth\tm.onnx\t12\t{SUM}\n"
    f"file\thub\tboth\tmodels--o--r/blobs/e\t3\t{SUM}\n"
    "link\thub\tmodels--o--r/snapshots/c0ffee/config.json\t../../blobs/e\n"
)


def test_parse_serve_reads_every_record_kind() -> None:
    serve = parse_serve(SERVE)
    assert [loc.id for loc in serve.served()] == ["s3tokenizer.0", "hub.0"]
    assert serve.locations[0].describe() == "${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer"
    assert serve.files[1].size == 3 and serve.links[0].target == "../../blobs/e"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("loc\tx\n", "line 1"),
        (
            "# bake serve v1\nsymlink\ta\tb\n",
            "bake.serve:2: expected a loc, set, dir, place, skip, file or link",
        ),
        ("# bake serve v1\nlink\ta\tb\n", "bake.serve:2: expected 4 tab-separated fields, saw 3"),
        (
            f"# bake serve v1\nfile\tnowhere\tboth\tb\t1\t{SUM}\n",
            "expected a CONSUMER with a set record above",
        ),
        (SERVE.replace("\t12\t0", "\ttwelve\t0"), "expected SIZE in bytes, saw 'twelve'"),
    ],
)
def test_parse_serve_refuses_what_it_does_not_know(text: str, named: str) -> None:
    with pytest.raises(ServeError, match=named.replace("[", r"\[").replace("$", r"\$")):
        parse_serve(text)


def test_legacy_serve_is_the_built_ins_for_the_locks_assets() -> None:
    serve = legacy_serve(
        [
            {"path": "tiktoken/abc", "size": 5, "sha256": "0" * 64},
            {"path": "whisper/x.pt", "size": 1, "sha256": "1" * 64},
        ]
    )
    assert [loc.describe() for loc in serve.locations] == ["$TIKTOKEN_RS_CACHE_DIR", "$TIKTOKEN_CACHE_DIR"]
    assert {f.asset for f in serve.files} == {"tiktoken/abc"}


def _tar(members: dict[str, bytes | str], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of regular files (bytes) and links (str targets)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, value in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
    return buffer.getvalue()


def _chunks(data: bytes, size: int = 4096):
    return (data[i : i + size] for i in range(0, len(data), size))


@pytest.fixture
def archive() -> bytes:
    """A saved image in the OCI layout: one layer, one config with history."""
    secret = b"hf_s3cr3t"
    # The secret straddles the scanner's chunk boundary inside a large file.
    big = b"a" * (CHUNK - 4) + secret + b"b" * 100
    layer = _tar(
        {"opt/clean": b"x", "opt/big.bin": big, f"etc/{secret.decode()}-name": b"", "etc/l": "/tmp/hf_s3cr3t"}
    )
    config = json.dumps(
        {"history": [{"created_by": "RUN true"}, {"created_by": "RUN echo hf_s3cr3t"}]}
    ).encode()
    return _tar({"blobs/sha256/aaaa": layer, "blobs/sha256/cccc": config, "index.json": b"{}"})


def test_scan_archive_names_layer_path_link_and_history(archive: bytes) -> None:
    found = {f.where for f in scan_archive(_chunks(archive), [b"hf_s3cr3t"])}
    assert {
        "layer sha256:aaaa: opt/big.bin",
        "layer sha256:aaaa: name etc/hf_s3cr3t-name",
        "layer sha256:aaaa: link target of etc/l",
        "history entry 1",
        "image document blobs/sha256/cccc",
    } == found


def test_scan_archive_reports_nothing_for_an_absent_pattern(archive: bytes) -> None:
    assert scan_archive(_chunks(archive), [b"not-there"]) == []


def test_scan_archive_reads_gzip_layers() -> None:
    import gzip

    saved = _tar({"blobs/sha256/gz": gzip.compress(_tar({"root/token": b"tok=hf_zz"}))})
    assert [f.where for f in scan_archive(_chunks(saved), [b"hf_zz"])] == ["layer sha256:gz: root/token"]


def _pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=tmp_path, env={**clean, **env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_no_image_is_a_usage_error_naming_how_to_give_one(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--bake-image IMAGE or BAKE_IMAGE=IMAGE" in proc.stderr


def test_no_image_is_no_error_when_its_tests_are_not_selected(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing", "-k", "no_such_test")
    assert proc.returncode == 5, proc.stdout + proc.stderr  # pytest's "no tests collected"


def test_other_projects_pytest_runs_are_unchanged(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    assert 1\n")
    proc = _pytest(tmp_path, "-q")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def test_an_image_the_engine_cannot_give_is_a_usage_error(tmp_path: Path) -> None:
    # An unreachable engine (or one without the image) makes the same exit code, naming the cause.
    proc = _pytest(
        tmp_path, "--pyargs", "bake.testing", DOCKER_HOST=f"unix://{tmp_path}/no.sock", BAKE_IMAGE="x:y"
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "bake.testing: the Docker engine does not answer" in proc.stderr


def test_an_empty_secret_pattern_is_a_usage_error(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing", "--bake-secret-pattern", "")
    assert proc.returncode == 4 and "--bake-secret-pattern is empty" in proc.stderr, proc.stdout + proc.stderr


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


def test_an_image_and_local_mode_together_are_a_usage_error(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing", "--bake-local", "--bake-image", "x:y")
    assert proc.returncode == 4 and "--bake-image and --bake-local both given" in proc.stderr, proc.stderr

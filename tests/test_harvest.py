"""``bake harvest``: caches the real huggingface_hub filled from a loopback Hub, s3tokenizer and tiktoken
caches, hostile caches, the manifest rules, and ``--diff`` against a sealed root.

s3tokenizer's table comes from a stand-in package on PYTHONPATH holding only ``_MODELS`` and
``_SHA256S``: bake reads that table from the source, never importing it, as it reads the real one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake.consumers import sha1_name
from bake.manifest import load_manifest
from tests.hub_server import LoopbackHub
from tests.isolation import NETWORK_ENV
from tests.runners import REPO, bake

pytestmark = pytest.mark.timeout(120)

CONFIG = b'{"model_type": "bert", "hidden_size": 8}\n'
WEIGHTS = hashlib.sha256(b"weights").digest() * 2048  # 64 KiB, an LFS file served by the CDN
CHECKPOINT = b"onnx checkpoint bytes\n" * 100
S3_URL = "https://example.org/models/speech_tokenizer_test.onnx"
VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/test_base.tiktoken"
VOCAB = b"IQ== 0\nIg== 1\n"
PRELUDE = "# the site's manifest: this comment must survive a harvest\n\n"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    server = LoopbackHub(tmp_path_factory.mktemp("hub"))
    server.commit(
        "org/tiny",
        {
            "config.json": CONFIG,
            "tokenizer/vocab.txt": b"[PAD]\nhello\n",
            "model.safetensors": (WEIGHTS, True),
        },
    )
    server.commit("org/extra", {"config.json": b'{"extra": true}\n'})
    with server:
        yield server


@pytest.fixture
def s3_table(tmp_path: Path) -> str:
    """PYTHONPATH with a stand-in s3tokenizer whose table names CHECKPOINT."""
    package = tmp_path / "stand-in" / "s3tokenizer"
    package.mkdir(parents=True)
    sha = hashlib.sha256(CHECKPOINT).hexdigest()
    (package / "__init__.py").write_text(
        "raise RuntimeError('bake must read this table, never import it')\n"
        f"_MODELS = {{'speech_tokenizer_test': '{S3_URL}'}}\n"
        f"_SHA256S = {{'speech_tokenizer_test': '{sha}'}}\n"
    )
    return f"{package.parent}{os.pathsep}{REPO}"


def download(hub: LoopbackHub, hf_home: Path, code: str) -> None:
    """Run ``code`` with the real huggingface_hub against the loopback Hub, caching into ``hf_home``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in NETWORK_ENV and not k.startswith(("HF_", "HUGGINGFACE_"))
    }
    env |= {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(hf_home), "HF_HUB_DISABLE_XET": "1"}
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


SNAPSHOT_TINY = (
    "from huggingface_hub import snapshot_download\n"
    "snapshot_download('org/tiny', allow_patterns=['config.json', 'model.safetensors'])\n"
)


@pytest.fixture
def job(hub: LoopbackHub, tmp_path: Path) -> Path:
    """The caches of one job: a narrowed snapshot, a s3tokenizer checkpoint, a tiktoken vocab."""
    xdg = tmp_path / "xdg"
    download(hub, xdg / "huggingface", SNAPSHOT_TINY)
    (xdg / "s3tokenizer").mkdir(parents=True)
    (xdg / "s3tokenizer" / "speech_tokenizer_test.onnx").write_bytes(CHECKPOINT)
    (xdg / "tiktoken-rs-cache").mkdir()
    (xdg / "tiktoken-rs-cache" / sha1_name(VOCAB_URL)).write_bytes(VOCAB)
    return xdg


def known_vocab(manifest: Path) -> None:
    """A manifest that names VOCAB_URL (harvest knows a vocab's URL from tiktoken's table or the manifest)."""
    sha = hashlib.sha256(VOCAB).hexdigest()
    manifest.write_text(
        PRELUDE + f'[[asset]]\nname = "test_base"\npath = "tiktoken/{sha1_name(VOCAB_URL)}"\n'
        f'sha256 = "{sha}"\nurls = ["{VOCAB_URL}"]\n'
    )


def harvest(*args: str | Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    return bake("harvest", *args, env={"PYTHONPATH": pythonpath} if pythonpath else None)


def test_a_new_manifest_pins_what_the_job_read(job: Path, tmp_path: Path, s3_table: str) -> None:
    manifest = tmp_path / "new" / "assets.toml"
    manifest.parent.mkdir()
    proc = harvest(job, "--manifest", manifest, "--group", "ci", pythonpath=s3_table)
    assert proc.returncode == 0, proc.stderr
    assets = load_manifest(manifest)
    by_path = {a.path: a for a in assets}
    checkpoint = by_path["s3tokenizer/speech_tokenizer_test.onnx"]
    assert checkpoint.urls == (S3_URL,)
    assert checkpoint.sha256 == hashlib.sha256(CHECKPOINT).hexdigest() and checkpoint.groups == ("ci",)
    (entry,) = {e for a in assets if a.hub for e in a.hub.entries}
    assert (
        entry.repo == "org/tiny"
        and entry.ref == "main"
        and entry.include == ("config.json", "model.safetensors")
    )
    assert {f.path: f.sha256 for f in entry.files} == {
        "config.json": hashlib.sha256(CONFIG).hexdigest(),
        "model.safetensors": hashlib.sha256(WEIGHTS).hexdigest(),
    }
    # The vocab's URL is known to no table here (it is not a real encoding): never pinned.
    assert not any(a.path.startswith("tiktoken/") for a in assets)


def test_an_existing_manifest_keeps_its_text_and_a_second_harvest_adds_nothing(
    job: Path, tmp_path: Path, s3_table: str
) -> None:
    manifest = tmp_path / "assets.toml"
    known_vocab(manifest)
    before = manifest.read_text()
    partial = job / "tiktoken-rs-cache" / f"{sha1_name(VOCAB_URL)}.1f2e.tmp"
    partial.write_bytes(VOCAB[:3])
    first = harvest(job, "--manifest", manifest, pythonpath=s3_table)
    assert first.returncode == 0, first.stderr
    assert f"{partial}: no URL known here gives tiktoken this name" in first.stderr
    text = manifest.read_text()
    assert text.startswith(before), "the existing entry and comment must survive byte for byte"
    assert "test_base" not in first.stdout, "an entry already there is left as it is"
    second = harvest(job, "--manifest", manifest, pythonpath=s3_table)
    assert second.returncode == 0, second.stderr
    assert manifest.read_text() == text and "nothing new to pin" in second.stdout


def test_the_same_commit_gains_the_files_a_later_run_read(
    hub: LoopbackHub, job: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "assets.toml"
    assert harvest(job / "huggingface", "--manifest", manifest).returncode == 0
    download(
        hub,
        job / "huggingface",
        "from huggingface_hub import hf_hub_download\nhf_hub_download('org/tiny', 'tokenizer/vocab.txt')\n",
    )
    proc = harvest(job / "huggingface", "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert "added 1 file(s) to hub org/tiny@" in proc.stdout
    (entry,) = {e for a in load_manifest(manifest) if a.hub for e in a.hub.entries}
    assert {f.path for f in entry.files} == {"config.json", "model.safetensors", "tokenizer/vocab.txt"}
    assert "tokenizer/vocab.txt" in entry.include


def test_another_commit_is_reported_not_repinned(hub: LoopbackHub, job: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    assert harvest(job / "huggingface", "--manifest", manifest).returncode == 0
    text = manifest.read_text()
    newer = hub.commit("org/tiny", {"config.json": b'{"newer": 1}\n'}, ref="next")
    try:
        download(
            hub,
            job / "huggingface",
            "from huggingface_hub import hf_hub_download\n"
            "hf_hub_download('org/tiny', 'config.json', revision='next')\n",
        )
    finally:
        hub.repos[("model", "org/tiny")]["refs"].pop("next")
    proc = harvest(job / "huggingface", "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert (
        f"org/tiny@{newer}: the manifest pins org/tiny at" in proc.stderr and "not re-pinned" in proc.stderr
    )
    assert manifest.read_text() == text


def test_diff_of_the_same_caches_is_clean_and_names_one_more_model(
    hub: LoopbackHub, job: Path, tmp_path: Path, s3_table: str
) -> None:
    manifest = tmp_path / "assets.toml"
    known_vocab(manifest)
    assert harvest(job, "--manifest", manifest, pythonpath=s3_table).returncode == 0
    # Fetched from the loopback Hub and file:// (the checkpoint's origin stands in as a local copy).
    text = manifest.read_text()
    for url, path in (
        (S3_URL, "s3tokenizer/speech_tokenizer_test.onnx"),
        (VOCAB_URL, f"tiktoken-rs-cache/{sha1_name(VOCAB_URL)}"),
    ):
        text = text.replace(f'"{url}"', f'"{url}", "{(job / path).as_uri()}"')
    fetchable = tmp_path / "fetchable.toml"
    fetchable.write_text(text)
    dest = tmp_path / "dest"
    env = {"PYTHONPATH": s3_table, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_XET": "1"}
    env |= {"XDG_CACHE_HOME": str(tmp_path / "bake-cache"), "HF_HOME": str(tmp_path / "bake-hf")}
    for args in (("fetch", "-q", "--dest", dest), ("seal", "--dest", dest)):
        proc = bake(*args, "--manifest", fetchable, env=env)
        assert proc.returncode == 0, proc.stderr
    clean = harvest("--diff", dest, job, "--manifest", manifest, pythonpath=s3_table)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    download(
        hub,
        job / "huggingface",
        "from huggingface_hub import snapshot_download\nsnapshot_download('org/extra')\n",
    )
    proc = harvest("--diff", dest, job, "--manifest", manifest, pythonpath=s3_table)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.count("[[hub]]") == 1 and 'repo = "org/extra"' in proc.stdout
    assert "[[asset]]" not in proc.stdout


# --- hostile caches


def _repo(cache: Path, folder: str = "models--org--bad") -> tuple[Path, str]:
    commit = "c" * 40
    (cache / folder / "snapshots" / commit).mkdir(parents=True)
    (cache / folder / "blobs").mkdir()
    (cache / folder / "refs").mkdir()
    return cache / folder, commit


def _link(repo: Path, commit: str, name: str, target: str) -> None:
    (repo / "snapshots" / commit / name).symlink_to(target)


def hostile_link_to_file(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    (outside / "secret").write_bytes(b"secret\n")
    _link(repo, commit, "config.json", str(outside / "secret"))
    return "config.json: a link to"


def hostile_relative_escape(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    _link(repo, commit, "config.json", "../../../../outside/secret")
    return "config.json: a link to '../../../../outside/secret'"


def hostile_link_to_fifo(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    os.mkfifo(outside / "fifo")
    _link(repo, commit, "config.json", str(outside / "fifo"))
    return "config.json: a link to"


def hostile_fifo_blob(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    etag = "e" * 40
    os.mkfifo(repo / "blobs" / etag)
    _link(repo, commit, "config.json", f"../../blobs/{etag}")
    return f"its blob {etag} is a FIFO"


def hostile_blob_bytes(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache)
    etag = hashlib.sha256(b"the real bytes").hexdigest()
    (repo / "blobs" / etag).write_bytes(b"other bytes")
    _link(repo, commit, "model.bin", f"../../blobs/{etag}")
    return "its blob's bytes do not match its name"


def hostile_ref_to_missing_snapshot(cache: Path, outside: Path) -> str:
    repo, _ = _repo(cache)
    (repo / "refs" / "main").write_text("d" * 40)
    return f"refs/main: names commit {'d' * 40}, but snapshots/{'d' * 40} is missing"


def hostile_ref_not_hex(cache: Path, outside: Path) -> str:
    repo, _ = _repo(cache)
    (repo / "refs" / "main").write_text("z" * 40)
    return "refs/main: holds 'zzzz"


def hostile_dotdot_name(cache: Path, outside: Path) -> str:
    repo, commit = _repo(cache, "models--org--a..b")
    (repo / "blobs" / hashlib.sha256(b"x").hexdigest()).write_bytes(b"x")
    _link(repo, commit, "x.bin", f"../../blobs/{hashlib.sha256(b'x').hexdigest()}")
    return "models--org--a..b: not pinnable"


def hostile_partial(cache: Path, outside: Path) -> str:
    repo, _ = _repo(cache)
    (repo / "blobs" / f"{'a' * 64}.incomplete").write_bytes(b"half")
    return "a partial download (.incomplete)"


HOSTILE = [
    hostile_link_to_file,
    hostile_relative_escape,
    hostile_link_to_fifo,
    hostile_fifo_blob,
    hostile_blob_bytes,
    hostile_ref_to_missing_snapshot,
    hostile_ref_not_hex,
    hostile_dotdot_name,
    hostile_partial,
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", HOSTILE, ids=[f.__name__ for f in HOSTILE])
def test_a_hostile_cache_is_listed_and_nothing_is_written(plant, tmp_path: Path) -> None:
    cache, outside = tmp_path / "hub", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    expected = plant(cache, outside)
    before = {p: p.lstat().st_atime_ns for p in outside.iterdir()}
    manifest = tmp_path / "assets.toml"
    proc = harvest(cache, "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stderr and "not pinned" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not manifest.exists(), "nothing pinnable: no manifest is started"
    assert {p: p.lstat().st_atime_ns for p in outside.iterdir()} == before, "nothing outside was read"


def test_unreadable_and_bad_input_exit_codes(tmp_path: Path) -> None:
    missing = harvest(tmp_path / "nope", "--manifest", tmp_path / "m.toml")
    assert missing.returncode == 3 and "cannot read it as a cache" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[[asset]\n")
    assert harvest(tmp_path, "--manifest", bad).returncode == 2
    assert harvest("--manifest", bad).returncode == 2  # no DIR
    lock_less = harvest("--diff", tmp_path / "nope", tmp_path)
    assert lock_less.returncode == 2 and "not a directory" in lock_less.stderr


def test_a_declared_consumer_file_is_named_with_the_add_line(tmp_path: Path) -> None:
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        PRELUDE
        + '[[consumer]]\nname = "whisper"\nlocations = ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper"]\n\n'
        f'[[asset]]\nname = "x"\npath = "other/x"\nsha256 = "{"0" * 64}"\nurls = ["file:///x"]\n'
    )
    (tmp_path / "xdg" / "whisper").mkdir(parents=True)
    (tmp_path / "xdg" / "whisper" / "base.pt").write_bytes(b"w")
    before = manifest.read_text()
    proc = harvest(tmp_path / "xdg", "--manifest", manifest)
    assert proc.returncode == 0, proc.stderr
    assert "`bake add URL --path whisper/base.pt`" in proc.stderr
    assert manifest.read_text() == before
    assert "nothing new to pin" in proc.stdout


# -- without the libraries (issue 37): every file gets a line; a partial is one; --diff reads the lock ----

PARTIAL = f"{sha1_name(VOCAB_URL)}.0b9e2c4e-3f6a-4d2b-9c1e-5a7f8d6e4b3a.tmp"


def bare_harvest(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``bake harvest`` where no library is installed: Python without its site-packages."""
    from tests.runners import cli_env

    return subprocess.run([sys.executable, "-S", "-m", "bake", "harvest", *map(str, args)], env=cli_env(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def not_pinned(proc: subprocess.CompletedProcess[str], name: str) -> str:
    (line,) = [
        line for line in proc.stderr.splitlines() if line.startswith("bake: not pinned:") and name in line
    ]
    return line


@pytest.mark.parametrize("layout", ["the directory itself", "a TMPDIR holding tiktoken-rs-cache"])
def test_a_tiktoken_cache_without_tiktoken_gets_a_line_per_file(tmp_path: Path, layout: str) -> None:
    cache = tmp_path / "tmp" / "tiktoken-rs-cache"
    cache.mkdir(parents=True)
    (cache / sha1_name(VOCAB_URL)).write_bytes(VOCAB)
    (cache / PARTIAL).write_bytes(VOCAB[:5])
    proc = bare_harvest(cache if layout == "the directory itself" else tmp_path / "tmp",
                        "--manifest", tmp_path / "assets.toml")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no cache of any consumer" not in proc.stderr, proc.stderr
    whole = not_pinned(proc, sha1_name(VOCAB_URL) + ":")
    assert "tiktoken is not installed here" in whole and f"--path tiktoken/{sha1_name(VOCAB_URL)}`" in whole
    partial = not_pinned(proc, PARTIAL)
    assert "a partial download" in partial and "bake add" not in partial, partial
    assert not (tmp_path / "assets.toml").exists()


def test_a_partial_vocab_is_named_as_one_with_tiktoken_installed(tmp_path: Path) -> None:
    (tmp_path / "tiktoken-rs-cache").mkdir()
    (tmp_path / "tiktoken-rs-cache" / PARTIAL).write_bytes(VOCAB[:5])
    manifest = tmp_path / "assets.toml"
    known_vocab(manifest)
    proc = harvest(tmp_path / "tiktoken-rs-cache", "--manifest", manifest)
    partial = not_pinned(proc, PARTIAL)
    assert "a partial download" in partial and "bake add" not in partial, partial


@pytest.mark.parametrize("library", ["without s3tokenizer", "with s3tokenizer's table rejecting it"])
def test_diff_counts_a_file_the_lock_holds_as_baked(tmp_path: Path, library: str) -> None:
    """The lock holds the checkpoint's path and sha256: baked, whether or not harvest could pin it."""
    src = tmp_path / "ckpt.onnx"
    src.write_bytes(CHECKPOINT)
    manifest = tmp_path / "assets.toml"
    manifest.write_text(
        '[[asset]]\nname = "speech_tokenizer_v3_25hz"\npath = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"\n'
        f'sha256 = "{hashlib.sha256(CHECKPOINT).hexdigest()}"\nurls = ["{src.as_uri()}"]\n'
    )
    root = tmp_path / "root"
    for command in ("fetch", "seal"):
        proc = bake(
            command,
            "--manifest",
            manifest,
            "--dest",
            root,
            *(("--cache-dir", tmp_path / "c") if command == "fetch" else ()),
        )
        assert proc.returncode == 0, proc.stderr
    xdg = tmp_path / "xdg"
    (xdg / "s3tokenizer").mkdir(parents=True)
    (xdg / "s3tokenizer" / "speech_tokenizer_v3_25hz.onnx").write_bytes(CHECKPOINT)
    run = bare_harvest if library == "without s3tokenizer" else harvest
    proc = run("--diff", root, xdg)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "has everything the caches hold" in proc.stdout, proc.stdout
    (xdg / "s3tokenizer" / "speech_tokenizer_v3_25hz.onnx").write_bytes(CHECKPOINT + b"changed")
    proc = run("--diff", root, xdg)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "speech_tokenizer_v3_25hz.onnx" in proc.stderr

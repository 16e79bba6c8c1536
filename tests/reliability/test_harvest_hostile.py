"""Hostile roots and caches against ``bake/harvest``. (Round 5, issue 38: R5-4, R5-7, R5-8, an observation.)

- ``harvest --diff ROOT`` never pulls a reference that names no registry host. The engine is a
  loopback stand-in on a unix socket that records every call and claims every pull works.
- A snapshot folder whose name ends in a newline is not pinned.
- ``harvest`` starts a manifest that holds only comments, or nothing, as ``bake add`` does.
- The large file harvest hashes says so on stderr as it reads.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bake.hub import scan

from . import bake
from .lying_engine import LyingEngine
from .tiny_hub import BLOB, COMMIT

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("root", ["build/assets", "assets:latest", "library/ubuntu@sha256:" + "a" * 64])
def test_harvest_diff_never_pulls_a_reference_without_its_registry_host(
    lying_engine: LyingEngine, tmp_path: Path, root: str
) -> None:
    (tmp_path / "cache").mkdir()
    env = {"DOCKER_HOST": f"unix://{lying_engine.sock}"}
    proc = bake("harvest", "--diff", root, tmp_path / "cache", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert f"--diff {root}: not a directory, and not an image the engine has" in proc.stderr
    assert "registry host" in proc.stderr and "Traceback" not in proc.stderr
    assert not [c for c in lying_engine.calls if "/images/create" in c], lying_engine.calls


@pytest.mark.parametrize("root", ["./build/assets", "/nonexistent/assets", "Build/Assets", "a b"])
def test_harvest_diff_refuses_a_missing_directory_before_asking_any_engine(
    lying_engine: LyingEngine, tmp_path: Path, root: str
) -> None:
    (tmp_path / "cache").mkdir()
    env = {"DOCKER_HOST": f"unix://{lying_engine.sock}"}
    proc = bake("harvest", "--diff", root, tmp_path / "cache", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and f"--diff {root}: not a directory" in proc.stderr, proc.stderr
    assert lying_engine.calls == [], "no engine is asked about a path"


@pytest.fixture
def local_root_image(engine: None, tmp_path: Path) -> Iterator[str]:
    """An image only the engine has, named without a registry host: a sealed root's lock, imported."""
    import docker

    tree = tmp_path / "root.tar"
    lock = json.dumps({"version": 1, "manifest_digest": "0" * 64, "assets": []}).encode()
    with tarfile.open(tree, "w") as tar:
        info = tarfile.TarInfo("opt/bake/assets/bake.lock.json")
        info.size = len(lock)
        tar.addfile(info, io.BytesIO(lock))
    ref = f"rel-harvest-root:{uuid.uuid4().hex[:10]}"
    client = docker.from_env()
    client.api.import_image(src=str(tree), repository=ref.split(":")[0], tag=ref.split(":")[1])
    try:
        yield ref
    finally:
        client.images.remove(ref, force=True)
        client.close()


@pytest.mark.docker
def test_harvest_diff_reads_an_image_the_engine_has_without_its_host(
    local_root_image: str, tmp_path: Path
) -> None:
    (tmp_path / "cache").mkdir()
    proc = bake("harvest", "--diff", local_root_image, tmp_path / "cache", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"bake: {local_root_image} has everything the caches hold" in proc.stdout


def test_harvest_pins_no_snapshot_whose_name_ends_in_a_newline(tmp_path: Path) -> None:
    folder = tmp_path / "hf" / "hub" / "models--org--tiny"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / BLOB).write_bytes(b"abc")
    snapshot = folder / "snapshots" / f"{COMMIT}\n"
    snapshot.mkdir(parents=True)
    (snapshot / "a.txt").symlink_to(f"../../blobs/{BLOB}")
    manifest = tmp_path / "assets.toml"
    proc = bake("harvest", tmp_path / "hf", "--manifest", manifest, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "not named by a full commit" in proc.stderr
    assert not manifest.exists(), "nothing pinnable: no manifest is started"


# ---- R5-8: harvest starts a manifest that holds no entry yet --------------------------------------


@pytest.mark.parametrize("text", ["# the site's assets, pinned by harvest\n", ""], ids=["a comment", "empty"])
def test_harvest_starts_a_manifest_of_comments_or_nothing(tmp_path: Path, text: str) -> None:
    folder = tmp_path / "hf" / "hub" / "models--org--tiny"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / BLOB).write_bytes(b"abc")
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "snapshots" / COMMIT / "a.txt").symlink_to(f"../../blobs/{BLOB}")
    manifest = tmp_path / "assets.toml"
    manifest.write_text(text)
    proc = bake("harvest", tmp_path / "hf", "--manifest", manifest, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = manifest.read_text()
    assert after.startswith(text) and f'commit = "{COMMIT}"' in after
    assert bake("manifest", "check", "--manifest", manifest, cwd=tmp_path).returncode == 0


# ---- observation: a large file says so as harvest reads it ---------------------------------------


def test_a_large_cached_file_shows_progress_as_it_is_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"x" * (3 << 20))
    monkeypatch.setattr(scan, "PROGRESS_ABOVE", 1 << 20)
    monkeypatch.setattr(scan, "PROGRESS_EVERY", 0.0)
    with caplog.at_level(logging.INFO, logger="bake.hub.scan"):
        read = b"".join(scan.read_regular(str(path)))
    assert len(read) == 3 << 20
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"reading {path} (") and lines[0].endswith("GiB) to hash it")
    assert len(lines) >= 3 and all(line.startswith(f"reading {path}: ") for line in lines[1:]), lines
    small = tmp_path / "small"
    small.write_bytes(b"y" * 1000)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bake.hub.scan"):
        b"".join(scan.read_regular(str(small)))
    assert caplog.records == []

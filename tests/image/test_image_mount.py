"""Delivery without a rebuild: the published assets image mounted read-only, served by the runner line.

Docker 28 mounts an image with `docker run --mount type=image` (containerd image store), and
Kubernetes with an image volume (`volumes[].image`). The engine here (26.1) has neither, so this does
what they do: a dockerd with the containerd image store pulls the whole image `bake publish` pushed,
`ctr images mount` mounts it read-only, and that tree is bound read-only at /opt/bake/assets in a
container of the image under test, whose runner line serves from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.assets import mirror_args
from tests.baked import FILES, VOCAB_PATH, sha256, write_manifest
from tests.baked import serve as serve_files
from tests.engines import second_engine
from tests.mirror import Mirror
from tests.registries import REGISTRY, remove_images_named

from . import REPO, fail_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

RUN = f"bake-mount-{uuid.uuid4().hex[:10]}"
RUNNER = 'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'


def published(tmp: Path) -> str:
    """``bake publish --group vllm`` of tests.baked's manifest; return the whole image, pinned."""
    manifest = write_manifest(tmp / "assets.toml")
    with Mirror() as mirror:
        serve_files(mirror)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "ASSET_MIRRORS": " ".join(mirror_args(mirror.url("/").rstrip("/"))),
            "BAKE_FETCH_ARGS": "--no-origin",
            "FETCH_IMAGE": "local/rocm-standin:bookworm",
        }
        proc = subprocess.run(
            [sys.executable, "-m", "bake", "publish", "--manifest", str(manifest), "--group", "vllm",
             "--repository", f"{REGISTRY}/bake-test/{RUN}", "--", "--network=host", "--allow=network.host"],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    kind, pinned = proc.stdout.splitlines()[-1].split()
    assert kind == "image"
    return pinned


def test_the_runner_line_serves_from_the_mounted_image(image: str, tmp_path: Path) -> None:
    dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    ctr = shutil.which("ctr")
    if dockerd is None or ctr is None:
        fail_or_skip("dockerd and ctr are needed; run scripts/toolchain.sh up")
    whole = published(tmp_path)
    ref = whole.partition("@")[0]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    work = Path(tempfile.mkdtemp(prefix="bake-mount-"))  # short: containerd's socket paths are bounded
    with second_engine(dockerd, work, "containerd", "bake-mount") as engine:
        engine.client.images.pull(*ref.rsplit(":", 1))
        address = ["--address", str(engine.containerd), "-n", engine.namespace]
        subprocess.run([ctr, *address, "images", "mount", ref, str(mnt)], check=True, capture_output=True)
        try:
            vocab = f'"$TIKTOKEN_RS_CACHE_DIR/{VOCAB_PATH.split("/")[1]}"'
            job = f'{RUNNER}; sha256sum {vocab}; cat "$BAKE_ASSETS/bake.lock.json"'
            proc = subprocess.run(
                ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/bash",
                 "-v", f"{mnt}/opt/bake/assets:/opt/bake/assets:ro", image, "-o", "pipefail", "-c", job],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
        finally:
            subprocess.run([ctr, *address, "images", "unmount", str(mnt)], check=True, capture_output=True)
            remove_images_named(RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    served, _, lock = proc.stdout.partition("\n")
    assert served.split()[0] == sha256(FILES[VOCAB_PATH])
    assert json.loads(lock)["manifest_digest"] == ref.rsplit(":", 1)[1]

"""bake.signed_image (``bake verify --image REF --key KEY``): the image's files hashed against its lock.

With the real cosign and the toolchain's registry (tests/signed.py pushes the images by hand); the
whole round trip, signed and verified, with bake.testing too, is in tests/test_signing.py.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from bake.index import lock_document
from tests.runners import bake
from tests.signed import UNITS, push_image, tar_of

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_bake_verify_image_without_a_registry_host_needs_the_repository(keys) -> None:
    proc = bake("verify", "--image", "bake/rocm-test:local", "--key", keys[1])
    assert proc.returncode == 2
    assert "give --repository REPO" in proc.stderr


def test_bake_verify_image_hashes_the_images_files_against_its_lock(
    published, keys, repository: str, image_cleanup: None
) -> None:
    _, assets = published
    lock = lock_document(assets, {a.path: a.size for a in assets})
    files = {path: data for unit in UNITS.values() for path, data in unit.items()}
    files["data/vocab.bin"] = files["data/vocab.bin"][:-1] + b"?"
    index = tar_of({"bake.lock.json": json.dumps(lock).encode()})
    tampered = push_image(repository, "tampered", [tar_of(files), index])
    proc = bake("verify", "--image", f"{repository}@{tampered}", "--key", keys[1], "--no-tlog", timeout=240)
    assert proc.returncode == 3, proc.stderr
    vocab = next(a for a in assets if a.path == "data/vocab.bin")
    assert "1 asset(s) differ from its bake.lock.json, so no signature can vouch for them" in proc.stderr
    assert f"data/vocab.bin: 1200 bytes, sha256 {sha256_of(files['data/vocab.bin'])}; " in proc.stderr
    assert f"the lock says 1200, {vocab.sha256}" in proc.stderr

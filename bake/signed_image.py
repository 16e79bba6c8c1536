"""``bake verify --image REF --key KEY``: prove that the assets a built image carries were published signed.

The image's ``bake.lock.json``, read through the engine as ``bake.testing`` reads it (an image the
engine lacks is pulled: the user named it), gives the manifest digest and every file. Each file
in the image is hashed against it (streamed out of a container that never starts), and
``bake.signing.verify_lock`` proves the whole image ``REPO:<manifest digest>`` and its index
signed by the key, the whole's attestation equal to the lock, and each unit image it names signed
and attesting files the lock records, all of them together. REPO is the one given, else the
image's own repository.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import IO

from bake.cosign import Cosign, CosignError, Unverified, check_key
from bake.errors import BuildError, UsageError, VerifyError
from bake.index import LOCK_NAME
from bake.signing import image_repository, verify_lock
from bake.testing.image import ImageError, ImageUnderTest  # the docker SDK only when an image is opened
from bake.testing.layers import CHUNK, ChunkReader


def verify_image(ref: str, key: str, repository: str | None, *, tlog: bool = True) -> str:
    """Prove the assets of the image ``ref`` published to ``repository`` and signed with ``key``.

    Returns the line ``bake verify`` prints. Raises UsageError for a key cosign cannot take, without
    cosign, and when no repository is given or can be taken from ``ref``; VerifyError (exit 3) for
    an image without a lock and for every failed proof.
    """
    cosign = Cosign(check_key(key, "--key"), tlog=tlog)
    repository = repository or image_repository(ref)
    if repository is None:
        raise UsageError(
            f"--image {ref}: its name has no registry host, so it names no repository its assets were "
            "published to; give --repository REPO (the `bake publish --repository`)"
        )
    image, lock = _lock(ref)
    problems = _files(image, lock)
    if problems:
        raise VerifyError(
            f"{ref}: {len(problems)} asset(s) differ from its {LOCK_NAME}, so no signature can vouch for "
            "them:\n" + "\n".join(f"  {line}" for line in problems)
        )
    try:
        units = verify_lock(lock, repository, cosign)
    except (Unverified, CosignError, BuildError) as exc:  # BuildError: the registry did not answer
        raise VerifyError(f"{ref}: its assets are not proved published by the key's holder: {exc}") from None
    files = len(lock["assets"])
    return f"bake: {ref}: {files} asset(s) in {units} unit image(s) of {repository}, signed with {key}"


def _files(image: ImageUnderTest, lock: dict) -> list[str]:
    """Hash every file the lock records as the image holds it; return each difference."""
    root = image.asset_root
    expected = {e["path"]: (e["size"], e["sha256"]) for e in lock["assets"]}
    found: dict[str, tuple[int, str]] = {}
    container = image.client.containers.create(image.image.id, entrypoint=["true"], network_mode="none")
    try:
        chunks, _ = container.get_archive(root)  # members are named <root's last component>/PATH
        stream = io.BufferedReader(ChunkReader(chunks), CHUNK)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                path = member.name.partition("/")[2]
                if path in expected and member.isfile():
                    found[path] = (member.size, _sha256(tar.extractfile(member)))
                elif path in expected and member.islnk():  # a second name of a file already read
                    found[path] = found.get(member.linkname.partition("/")[2], (-1, ""))
    finally:
        container.remove(force=True)
    problems = []
    for path, (size, sha256) in sorted(expected.items()):
        if path not in found:
            problems.append(f"{path}: missing at {root}/{path} (not a regular file there)")
        elif found[path] != (size, sha256):
            seen_size, seen_sha = found[path]
            problems.append(f"{path}: {seen_size} bytes, sha256 {seen_sha}; the lock says {size}, {sha256}")
    return problems


def _sha256(stream: IO[bytes] | None) -> str:
    digest = hashlib.sha256()
    while stream is not None and (block := stream.read(CHUNK)):
        digest.update(block)
    return digest.hexdigest()


def _lock(ref: str) -> tuple[ImageUnderTest, dict]:
    """The image and its lock, parsed and checked for what verify_lock reads. Raises VerifyError."""
    try:
        image = ImageUnderTest(ref)
        path = f"{image.asset_root}/{LOCK_NAME}"
        data = image.read_file(path)
    except ImageError as exc:
        raise VerifyError(f"--image {ref}: {exc}") from None
    if data is None:
        raise VerifyError(
            f"{ref}: no {path}; the image carries no bake asset layer, so nothing is there to verify"
        )
    try:
        lock = json.loads(data)
        if not isinstance(lock["manifest_digest"], str) or not all(
            isinstance(e["path"], str) and isinstance(e["size"], int) and isinstance(e["sha256"], str)
            for e in lock["assets"]
        ):
            raise ValueError("a field of the wrong type")
    except (ValueError, KeyError, TypeError) as exc:
        raise VerifyError(f"{ref}: {path} is not a bake lock ({type(exc).__name__}: {exc})") from None
    return image, lock

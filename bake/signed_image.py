"""``bake verify --image REF --key KEY``: prove that the assets a built image carries were published signed.

The image's ``bake.lock.json``, read through the engine as ``bake.testing`` reads it (an image the
engine lacks is pulled: the user named it), gives the manifest digest and every file.
``bake.signing.verify_lock`` then proves the whole image ``REPO:<manifest digest>`` and its index
signed by the key, the whole's attestation equal to the lock, and each unit image it names signed
and attesting files the lock records, all of them together. REPO is the one given, else the
image's own repository.
"""

from __future__ import annotations

import json

from bake.cosign import Cosign, CosignError, Unverified, check_key
from bake.errors import BuildError, UsageError, VerifyError
from bake.index import LOCK_NAME
from bake.signing import image_repository, verify_lock


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
    lock = _lock(ref)
    try:
        units = verify_lock(lock, repository, cosign)
    except (Unverified, CosignError, BuildError) as exc:  # BuildError: the registry did not answer
        raise VerifyError(f"{ref}: its assets are not proved published by the key's holder: {exc}") from None
    files = len(lock["assets"])
    return f"bake: {ref}: {files} asset(s) in {units} unit image(s) of {repository}, signed with {key}"


def _lock(ref: str) -> dict:
    """The image's lock, parsed and checked for what verify_lock reads. Raises VerifyError."""
    from bake.testing.image import ImageError, ImageUnderTest  # the docker SDK, imported when used

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
    return lock

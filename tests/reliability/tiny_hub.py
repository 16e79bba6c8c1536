"""One Hub repository of one file (org/tiny's a.txt, b"abc") for the hostile manifest and harvest tests:
its commit, its blob id, and its ``[[hub]]`` entry with any value changed."""

from __future__ import annotations

import hashlib
import json

from . import sha256

COMMIT = "c" * 40
BLOB = hashlib.sha1(b"blob 3\x00abc").hexdigest()


def hub_entry(**changes: str) -> str:
    keys = {"commit": COMMIT, "sha256": sha256(b"abc"), "blob": BLOB, **changes}
    sha, blob_id = json.dumps(keys["sha256"]), json.dumps(keys["blob"])
    return (
        f'[[hub]]\nrepo = "org/tiny"\ncommit = {json.dumps(keys["commit"])}\nfiles = [\n'
        f'  {{path = "a.txt", size = 3, sha256 = {sha}, blob = {blob_id}}},\n]\n'
    )

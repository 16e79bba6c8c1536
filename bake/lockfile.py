"""The destination index: SHA256SUMS, bake.lock.json, verification and the image seal."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bake import atomic
from bake.errors import FetchError, UsageError, VerifyError
from bake.hashes import sha256_file
from bake.manifest import Asset, manifest_digest

SUMS_NAME = "SHA256SUMS"
LOCK_NAME = "bake.lock.json"
LOCK_VERSION = 1
FILE_MODE = 0o444
DIR_MODE = 0o555


@dataclass(frozen=True)
class LockedFile:
    """One verified file as the lock records it."""

    path: str
    size: int | None
    sha256: str


def _install_together(files: dict[Path, bytes]) -> None:
    """Stage every file, and only when all are on disk rename them into place and fsync the directory.

    Either every target is replaced or none is. Raises NoSpaceError when the
    disk is full, FetchError for any other write failure.
    """
    names = ", ".join(t.name for t in files)
    need = sum(len(d) for d in files.values())
    try:
        with atomic.no_space_as_error(
            names,
            next(iter(files)),
            need,
            "free space there and rerun (the verified assets are already in place)",
        ):
            atomic.write_together(files)
    except OSError as exc:
        raise FetchError(f"{names}: cannot write them: {exc.strerror or exc}") from None


def lock_document(assets: list[Asset], sizes: dict[str, int]) -> dict:
    """Return the deterministic lock: each asset's path, size and sha256, plus the manifest digest."""
    return {
        "version": LOCK_VERSION,
        "manifest_digest": manifest_digest(assets),
        "assets": [
            {"name": a.name, "path": a.path, "size": sizes[a.path], "sha256": a.sha256}
            for a in sorted(assets, key=lambda a: a.path)
        ],
    }


def write_index(dest: Path, assets: list[Asset]) -> None:
    """Write SHA256SUMS and bake.lock.json at the root of ``dest``.

    Call only after every selected asset has verified; sizes are read from
    the installed files. Both files depend only on the selection's content.
    """
    sizes = {a.path: (dest / a.path).stat().st_size for a in assets}
    sums = "".join(f"{a.sha256}  {a.path}\n" for a in sorted(assets, key=lambda a: a.path))
    lock = json.dumps(lock_document(assets, sizes), indent=2, sort_keys=True) + "\n"
    _install_together({dest / SUMS_NAME: sums.encode(), dest / LOCK_NAME: lock.encode()})


def read_lock(dest: Path) -> list[LockedFile]:
    """Return the files ``dest/bake.lock.json`` records. Raises UsageError if it is unreadable."""
    lock_path = dest / LOCK_NAME
    try:
        doc = json.loads(lock_path.read_text(encoding="utf-8"))
        return [LockedFile(e["path"], e.get("size"), e["sha256"]) for e in doc["assets"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{lock_path}: cannot read the lock ({exc}); "
            "pass --manifest, or point --dest at a baked asset root"
        ) from None


def expected_files(assets: list[Asset]) -> list[LockedFile]:
    """Return the manifest's view of what a destination must hold."""
    return [LockedFile(a.path, a.size, a.sha256) for a in assets]


def verify_dest(dest: Path, files: list[LockedFile]) -> None:
    """Check every file under ``dest``: present, regular, right size, right sha256.

    Raises VerifyError listing every problem, one per line.
    """
    problems = []
    for entry in files:
        target = dest / entry.path
        if not target.is_file():
            seen = "missing" if not target.exists() and not target.is_symlink() else "not a regular file"
            problems.append(f"{entry.path}: expected a file with sha256 {entry.sha256}, found {seen}")
            continue
        size = target.stat().st_size
        if entry.size is not None and size != entry.size:
            problems.append(f"{entry.path}: expected {entry.size} bytes, found {size}")
            continue
        actual = sha256_file(target)
        if actual != entry.sha256:
            problems.append(f"{entry.path}: expected sha256 {entry.sha256}, found {actual}")
    if problems:
        raise VerifyError(
            f"{len(problems)} of {len(files)} asset(s) under {dest} failed verification:\n  "
            + "\n  ".join(problems)
            + "\nrerun `bake fetch` to restore them (a tampered image must be rebuilt)"
        )


def encoding_links(assets: list[Asset]) -> dict[str, str]:
    """Map ``tiktoken/<encoding>.tiktoken`` alias paths to the SHA-1-named files they point at.

    ``TIKTOKEN_ENCODINGS_BASE`` readers look for the URL's own file name.
    """
    links = {}
    for asset in assets:
        canonical = asset.canonical_url()
        if PurePosixPath(asset.path).parts[0] != "tiktoken" or canonical is None:
            continue
        alias = PurePosixPath(canonical.rsplit("/", 1)[-1]).name
        if alias.endswith(".tiktoken"):
            links[f"tiktoken/{alias}"] = PurePosixPath(asset.path).name
    return links


def seal(dest: Path, assets: list[Asset]) -> None:
    """Turn a verified destination into the image layout.

    Adds the encoding alias links, then makes files 0444 and directories 0555.
    Raises UsageError if ``dest`` was never fetched into or a link path is taken.
    """
    if not (dest / LOCK_NAME).is_file():
        raise UsageError(f"{dest}: no {LOCK_NAME}; run `bake fetch` into it before sealing")
    for alias, target in encoding_links(assets).items():
        link = dest / alias
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.is_symlink() or link.exists():
            raise UsageError(f"{link}: expected a link to {target}, found something else; remove it")
        link.symlink_to(target)
    for path in sorted(dest.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if not path.is_symlink():
            path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)
    dest.chmod(DIR_MODE)

"""The destination index: SHA256SUMS, bake.lock.json, verification and the image seal (links, bake.serve)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from bake import atomic, consumers
from bake.errors import FetchError, UsageError, VerifyError
from bake.hashes import sha256_file
from bake.hub import layout as hub_layout
from bake.manifest import Asset, Assets, declared_consumers, manifest_digest

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


def verify_dest(dest: Path, files: list[LockedFile], *, assets: list[Asset] | None = None) -> None:
    """Check every file under ``dest``: present, regular, right size, right sha256.

    With the manifest's ``assets``, a sealed ``dest`` must also hold the
    ``bake.serve`` and alias links the consumer table gives. Raises VerifyError
    listing every problem, one per line.
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
    if assets is not None and not problems:
        problems += check_seal(dest, assets)
    if problems:
        raise VerifyError(
            f"{len(problems)} of {len(files)} asset(s) under {dest} failed verification:\n  "
            + "\n  ".join(problems)
            + "\nrerun `bake fetch` to restore them (a tampered image must be rebuilt)"
        )


def alias_links(assets: list[Asset]) -> dict[str, str]:
    """Map each alias link path (relative to the asset root) to its relative target, from the consumer table.

    The tiktoken family's ``tiktoken/<encoding>.tiktoken`` links are the built-in case.
    """
    links: dict[str, str] = {}
    for consumer in Assets(assets, declared_consumers(assets)).consumers():
        links.update(consumer.aliases([a for a in assets if consumer.owns(a.path)]))
    return links


def serve_text(dest: Path, assets: list[Asset]) -> str:
    """Return the ``bake.serve`` that ``seal`` writes for ``assets`` baked under ``dest``.

    Sizes come from the lock, which holds the verified sizes even when the
    manifest leaves one out.
    """
    sizes = {f.path: f.size for f in read_lock(dest)}
    wanted = {a.path for a in assets}
    missing = sorted(wanted - sizes.keys())
    if missing:
        raise UsageError(
            f"{dest}: {LOCK_NAME} does not record {', '.join(missing)}; run `bake fetch` with the same "
            "manifest and groups before sealing"
        )
    files = [LockedFile(p, sizes[p], "") for p in sorted(wanted)]
    table = Assets(assets, declared_consumers(assets)).consumers()
    return consumers.serve_text(table, files, hub_layout.serve_records(assets))  # + the Hub's layout


def seal(dest: Path, assets: list[Asset]) -> None:
    """Turn a verified destination into the image layout.

    Adds the consumers' alias links and ``bake.serve`` (what the entrypoint
    serves where), then makes files 0444 and directories 0555. Idempotent.
    Raises UsageError if ``dest`` was never fetched into or a link path is taken.
    """
    if not (dest / LOCK_NAME).is_file():
        raise UsageError(f"{dest}: no {LOCK_NAME}; run `bake fetch` into it before sealing")
    for alias, target in alias_links(assets).items():
        link = dest / alias
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.is_symlink() or link.exists():
            raise UsageError(f"{link}: expected a link to {target}, found something else; remove it")
        link.symlink_to(target)
    _add_to_index(dest, hub_layout.write(dest, assets))  # the Hub's snapshot links, refs and trees
    serve = serve_text(dest, assets).encode()
    serve_path = dest / consumers.SERVE_NAME
    if not serve_path.is_file() or serve_path.read_bytes() != serve:
        _install_together({serve_path: serve})
    for path in sorted(dest.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if not path.is_symlink():
            path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)
    dest.chmod(DIR_MODE)


def _add_to_index(dest: Path, extra: dict[str, tuple[int, str]]) -> None:
    """List files seal writes itself (the Hub's refs and trees) in SHA256SUMS and the lock, both alike.

    ``extra`` maps paths to (size, sha256). Nothing is rewritten when both already list them.
    """
    if not extra:
        return
    doc = json.loads((dest / LOCK_NAME).read_text(encoding="utf-8"))
    entries = {e["path"]: e for e in doc["assets"]}
    entries |= {p: {"name": p, "path": p, "size": size, "sha256": sha} for p, (size, sha) in extra.items()}
    doc["assets"] = [entries[p] for p in sorted(entries)]
    sums = "".join(f"{e['sha256']}  {e['path']}\n" for e in doc["assets"]).encode()
    lock = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    if (dest / SUMS_NAME).read_bytes() != sums or (dest / LOCK_NAME).read_bytes() != lock:
        _install_together({dest / SUMS_NAME: sums, dest / LOCK_NAME: lock})


def check_seal(dest: Path, assets: list[Asset]) -> list[str]:
    """Return the problems of a sealed ``dest``: a ``bake.serve`` or alias link that is not what seal writes.

    An unsealed destination (no ``bake.serve``) has none.
    """
    serve_path = dest / consumers.SERVE_NAME
    if not serve_path.exists():
        return []
    problems = []
    expected = serve_text(dest, assets)
    if not serve_path.is_file() or serve_path.read_text(encoding="utf-8") != expected:
        problems.append(f"{consumers.SERVE_NAME}: not what `bake seal` writes for this manifest")
    for alias, target in alias_links(assets).items():
        link = dest / alias
        if not link.is_symlink() or os.readlink(link) != target:
            problems.append(f"{alias}: expected a link to {target}")
    return problems

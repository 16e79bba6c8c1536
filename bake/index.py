"""The destination's index: SHA256SUMS and bake.lock.json, written together and read back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bake import atomic
from bake.asset import Asset
from bake.errors import FetchError, UsageError
from bake.hashes import SHA256_HEX
from bake.manifest import manifest_digest

SUMS_NAME = "SHA256SUMS"
LOCK_NAME = "bake.lock.json"
LOCK_VERSION = 1


@dataclass(frozen=True)
class LockedFile:
    """One verified file as the lock records it."""

    path: str
    size: int | None
    sha256: str


def install_together(files: dict[Path, bytes]) -> None:
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
    _install_index(dest, lock_document(assets, sizes))


def _install_index(dest: Path, lock: dict) -> None:
    """Write ``lock`` as bake.lock.json and its entries, in their order, as SHA256SUMS, together."""
    sums = "".join(f"{e['sha256']}  {e['path']}\n" for e in lock["assets"])
    text = json.dumps(lock, indent=2, sort_keys=True) + "\n"
    install_together({dest / SUMS_NAME: sums.encode(), dest / LOCK_NAME: text.encode()})


def read_lock(
    dest: Path, what_to_do: str = "pass --manifest, or point --dest at a baked asset root"
) -> list[LockedFile]:
    """Return the files ``dest/bake.lock.json`` records.

    Raises UsageError if it is unreadable, ending with ``what_to_do``: the caller's own
    options (``verify`` takes --manifest and --dest, ``doctor`` takes --assets).
    """
    lock_path = dest / LOCK_NAME
    try:
        doc = json.loads(lock_path.read_text(encoding="utf-8"))
        return [LockedFile(e["path"], e.get("size"), e["sha256"]) for e in doc["assets"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{lock_path}: cannot read the lock ({exc}); {what_to_do}") from None


def read_sums(dest: Path) -> list[tuple[str, str]]:
    """Return (sha256, path) for each line of ``dest/SHA256SUMS``, as ``sha256sum -c`` would check them.

    Raises OSError when it cannot be read, and ValueError naming the first line that is not
    ``<sha256>  <path>`` (or `` *<path>``) with LF endings and a path inside ``dest``.
    """
    text = (dest / SUMS_NAME).read_bytes().decode("utf-8", "surrogateescape")
    entries = []
    lines = text.split("\n")[: -1 if text.endswith("\n") else None] if text else []
    for number, line in enumerate(lines, start=1):
        if line.endswith("\r"):
            raise ValueError(
                f"line {number} ends with a carriage return (CRLF line endings): "
                "expected LF line endings, as bake writes them"
            )
        sha, sep, path = line[:64], line[64:66], line[66:]
        if not (SHA256_HEX.match(sha) and sep in ("  ", " *") and path):
            raise ValueError(f"line {number} is not '<sha256>  <path>': expected the format bake writes")
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError(
                f"line {number} names '{path}', outside {dest}: expected a relative path inside it"
            )
        entries.append((sha, path))
    if not entries:
        raise ValueError("holds no checksum line: expected one per baked file")
    return entries
def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def other_selection(dest: Path, assets: list[Asset], chosen: str) -> str | None:
    """Why fetching ``assets`` (``chosen`` says how they were selected) into ``dest`` deserves a warning:
    its lock was written for another selection, whose files this one's lock would no longer list; or None.
    """
    try:
        doc = json.loads((dest / LOCK_NAME).read_text(encoding="utf-8"))
        before = {e["path"]: str(e.get("name") or e["path"]) for e in doc["assets"]}
        digest = doc.get("manifest_digest")
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no lock (or none bake wrote): nothing to compare
    selected = {a.path for a in assets}
    dropped = [name for path, name in sorted(before.items()) if path not in selected]
    if not dropped:
        return None
    return (
        f"--dest {dest}: its {LOCK_NAME} was written for another selection (manifest digest {digest}: "
        f"{_listed(sorted(before.values()))}); this fetch selects {chosen} (manifest digest "
        f"{manifest_digest(assets)}: {_listed(sorted(a.name for a in assets))}), so its lock will not list "
        f"{_listed(dropped)}, whose files stay under --dest: give each selection a --dest of its own, "
        "or fetch them together (one --group option for each)"
    )


def expected_files(assets: list[Asset]) -> list[LockedFile]:
    """Return the manifest's view of what a destination must hold."""
    return [LockedFile(a.path, a.size, a.sha256) for a in assets]


def add_to_index(dest: Path, extra: dict[str, tuple[int, str]]) -> None:
    """List files seal writes itself (the Hub's refs and trees) in SHA256SUMS and the lock, both alike.

    ``extra`` maps paths to (size, sha256). Nothing is rewritten when the lock already lists them
    as they are; else the lock's text changes, and both files are written.
    """
    if not extra:
        return
    doc = json.loads((dest / LOCK_NAME).read_text(encoding="utf-8"))
    entries = {e["path"]: e for e in doc["assets"]}
    new = {p: {"name": p, "path": p, "size": size, "sha256": sha} for p, (size, sha) in extra.items()}
    if all(entries.get(p) == e for p, e in new.items()):
        return  # a seal again: listed already (and the indented dump of a large lock is slow)
    entries |= new
    doc["assets"] = [entries[p] for p in sorted(entries)]
    _install_index(dest, doc)

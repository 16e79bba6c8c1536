"""The image seal: each consumer's alias links and files of its own, ``bake.serve``, read-only modes."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from bake import consumers, offline
from bake.asset import Asset
from bake.errors import UsageError, VerifyError
from bake.index import LOCK_NAME, add_to_index, install_together, read_lock
from bake.manifest import RESERVED_ROOT_NAMES, as_manifest

FILE_MODE = 0o444
DIR_MODE = 0o555


def _table(assets: list[Asset]) -> tuple[consumers.Consumer, ...]:
    """The consumer table of ``assets``: the manifest's, or the built-ins' for a plain list."""
    return as_manifest(assets).consumers()


def _links(table: Sequence[consumers.Consumer], assets: list[Asset]) -> dict[str, str]:
    links: dict[str, str] = {}
    for consumer in table:
        links.update(consumer.aliases([a for a in assets if consumer.owns(a.path)]))
    return links


def alias_links(assets: list[Asset]) -> dict[str, str]:
    """Map each alias link path (relative to the asset root) to its relative target, from the consumer table.

    The tiktoken family's ``tiktoken/<encoding>.tiktoken`` links and the Hub's snapshot links.
    """
    return _links(_table(assets), assets)


def serve_text(
    dest: Path, assets: list[Asset], table: Sequence[consumers.Consumer], links: Mapping[str, str]
) -> str:
    """Return the ``bake.serve`` that ``seal`` writes for ``assets`` baked under ``dest``, given their
    consumer ``table`` and alias ``links``.

    Sizes come from the lock, which holds the verified sizes even when the
    manifest leaves one out.
    """
    locked = {f.path: f for f in read_lock(dest)}
    wanted = {a.path for a in assets}
    missing = sorted(wanted - locked.keys())
    if missing:
        raise UsageError(
            f"{dest}: {LOCK_NAME} does not record {', '.join(missing)}; run `bake fetch` with the same "
            "manifest and groups before sealing"
        )
    files = [locked[p] for p in sorted(wanted)]
    return consumers.serve_text(table, files, links)


def placement_problems(dest: Path, rels: Iterable[str]) -> dict[str, str]:
    """Map each file at ``dest/rel`` that the layer may not carry (a link, or reached through a link
    out of ``dest``) to why. Only regular files inside ``dest`` are copied into a layer as themselves.

    Each directory is resolved once, however many files it holds.
    """
    root = os.path.realpath(dest)
    parents: dict[str, str] = {}
    problems = {}
    for rel in rels:
        target = dest / rel
        folder = os.path.dirname(rel)
        if folder not in parents:
            parents[folder] = os.path.realpath(dest / folder)
        parent = parents[folder]
        if parent != root and not parent.startswith(root + os.sep):
            problems[rel] = f"{rel}: reached through a link to {parent}, outside {dest}; " + (
                "replace the link with a directory"
            )
        elif target.is_symlink():
            problems[rel] = f"{rel}: a link to {os.readlink(target)}, not a regular file; " + (
                "rerun `bake fetch` to restore it"
            )
    return problems


def strays(dest: Path, expected: set[str]) -> list[str]:
    """Return every file or link under ``dest`` that is not in ``expected`` (relative paths), sorted.

    A file where one of their directories belongs is not counted: seal names it as in the way.
    """
    # Every directory above an expected file is expected too (string slicing: PurePosixPath costs
    # a second at 10,000 files).
    expected = set(expected)
    for rel in list(expected):
        cut = rel.rfind("/")
        while cut > 0 and rel[:cut] not in expected:
            expected.add(rel[:cut])
            cut = rel.rfind("/", 0, cut)
    found = []
    for base, dirs, files in os.walk(dest):
        rel_base = os.path.relpath(base, dest)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            rel = name if rel_base == "." else f"{rel_base}/{name}"
            if rel not in expected:
                found.append(rel)
    return sorted(found)


def _check_tree(
    dest: Path, table: Sequence[consumers.Consumer], links: Mapping[str, str], remove_stray: bool
) -> None:
    """Refuse a tree that holds what the layer must not carry: links in place of assets (VerifyError),
    and strays (UsageError, unless ``remove_stray`` removes them)."""
    locked = [f.path for f in read_lock(dest)]
    problems = list(placement_problems(dest, locked).values())
    if problems:
        raise VerifyError(f"{dest}: cannot seal what is not a verified file:\n  " + "\n  ".join(problems))
    own = {rel for consumer in table for rel in consumer.seal_files()}
    found = strays(dest, {*locked, *links, *own, *RESERVED_ROOT_NAMES})
    if found and not remove_stray:
        listing = "\n  ".join(found[:50]) + (f"\n  ... and {len(found) - 50} more" if len(found) > 50 else "")
        raise UsageError(
            f"--dest {dest}: {len(found)} file(s) that no selected asset accounts for would be sealed into "
            f"the layer (entries since removed from the manifest, or files put there by hand):\n  {listing}\n"
            "remove them, or pass --remove-stray to have seal remove them"
        )
    _remove(dest, found)


def _remove(dest: Path, paths: list[str]) -> None:
    """Remove ``paths`` under ``dest``, then the directories they leave empty."""
    for rel in paths:
        with _making(dest / rel, "no stray file"):
            os.unlink(dest / rel)
    for base, _dirs, _files in os.walk(dest, topdown=False):
        if base != str(dest) and not os.listdir(base):
            os.rmdir(base)


def seal(dest: Path, assets: list[Asset], *, remove_stray: bool = False) -> int:
    """Turn a verified destination into the image layout; return the number of assets sealed.

    Adds the consumers' alias links and files of their own (the Hub's refs and
    tree listings, listed in the index too) and ``bake.serve`` (what the
    entrypoint serves where), then makes files 0444 and directories 0555.
    Idempotent. Raises UsageError, before anything is written, if ``dest`` was
    never fetched into or a link's target is missing, when a path seal writes
    holds something else, and when ``dest`` holds files that no asset, index or
    seal file accounts for (strays; ``remove_stray`` removes them instead).
    Raises VerifyError when an asset is a link, or lies behind one out of ``dest``.
    """
    if not (dest / LOCK_NAME).is_file():
        raise UsageError(f"{dest}: no {LOCK_NAME}; run `bake fetch` into it before sealing")
    table = _table(assets)
    links = _links(table, assets)
    serve = serve_text(dest, assets, table, links).encode()
    root = str(dest)
    _check_tree(dest, table, links, remove_stray)
    for alias, target in links.items():
        # Worked out on the names: the link's directory may not exist yet.
        if not os.path.isfile(os.path.normpath(os.path.join(root, os.path.dirname(alias), target))):
            raise UsageError(
                f"{dest / alias}: its target {target} is missing; run `bake fetch` with the same manifest "
                "and groups before sealing"
            )
    for alias, target in links.items():
        _place_link(os.path.join(root, alias), target)
    written = {}
    for consumer in table:
        for rel, text in consumer.seal_files().items():
            _place_file(dest / rel, text)
            data = text.encode()
            written[rel] = (len(data), hashlib.sha256(data).hexdigest())
    add_to_index(dest, written)
    serve_path = dest / consumers.SERVE_NAME
    if not serve_path.is_file() or serve_path.read_bytes() != serve:
        install_together({serve_path: serve})
    switches = offline.write(offline.switches(table, [a.path for a in assets])).encode()
    if not (dest / offline.NAME).is_file() or (dest / offline.NAME).read_bytes() != switches:
        install_together({dest / offline.NAME: switches})
    # Children before their directory, which may already be read-only from an earlier seal.
    for base, dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                os.chmod(path, FILE_MODE)
        for name in dirs:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                os.chmod(path, DIR_MODE)
    dest.chmod(DIR_MODE)
    return len(assets)


def _place_link(path: str, target: str) -> None:
    """One alias link at ``path``, or nothing when it is there already. Plain os calls: a Hub
    repository of 10,000 files makes 10,000 of them."""
    try:
        if os.readlink(path) == target:
            return
    except OSError:
        pass
    if os.path.lexists(path):
        raise UsageError(f"{path}: expected a link to {target}, found something else; remove it and reseal")
    with _making(path, f"a link to {target}"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)


def _place_file(path: Path, text: str) -> None:
    if path.is_file() and not path.is_symlink() and path.read_bytes() == text.encode():
        return
    if path.is_symlink() or path.exists():
        raise UsageError(
            f"{path}: expected bake's own {path.name}, found something else; remove it and reseal"
        )
    with _making(path, f"bake's own {path.name}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def _making(path: str | Path, what: str) -> Iterator[None]:
    """Raise UsageError naming ``path`` when making ``what`` there fails: a file where one of its
    directories belongs, or a directory seal may not write."""
    try:
        yield
    except OSError as exc:
        raise UsageError(
            f"{path}: expected {what}, could not make it ({exc.strerror or exc}); remove the file in "
            "its way or make its directory writable, and reseal"
        ) from None


def check_seal(dest: Path, assets: list[Asset]) -> list[str]:
    """Return the problems of a sealed ``dest``: a ``bake.serve`` or alias link that is not what seal writes.

    An unsealed destination (no ``bake.serve``) has none.
    """
    serve_path = dest / consumers.SERVE_NAME
    if not serve_path.exists():
        return []
    problems = []
    table = _table(assets)
    links = _links(table, assets)
    expected = serve_text(dest, assets, table, links)
    if not serve_path.is_file() or serve_path.read_bytes() != expected.encode():
        problems.append(f"{consumers.SERVE_NAME}: not what `bake seal` writes for this manifest")
    for alias, target in links.items():
        link = dest / alias
        if not link.is_symlink() or os.readlink(link) != target:
            problems.append(f"{alias}: expected a link to {target}")
    return problems

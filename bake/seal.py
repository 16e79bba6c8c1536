"""The image seal: each consumer's alias links and files of its own, ``bake.serve``, read-only modes."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from bake import consumers, offline
from bake.errors import UsageError
from bake.index import LOCK_NAME, add_to_index, install_together, read_lock
from bake.manifest import Asset, Assets, declared_consumers

FILE_MODE = 0o444
DIR_MODE = 0o555


def _table(assets: list[Asset]) -> tuple[consumers.Consumer, ...]:
    """The consumer table of ``assets``: the manifest's, or the built-ins' for a plain list."""
    return Assets(assets, declared_consumers(assets)).consumers()


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


def seal(dest: Path, assets: list[Asset]) -> None:
    """Turn a verified destination into the image layout.

    Adds the consumers' alias links and files of their own (the Hub's refs and
    tree listings, listed in the index too) and ``bake.serve`` (what the
    entrypoint serves where), then makes files 0444 and directories 0555.
    Idempotent. Raises UsageError, before anything is written, if ``dest`` was
    never fetched into or a link's target is missing, and when a path seal
    writes holds something else.
    """
    if not (dest / LOCK_NAME).is_file():
        raise UsageError(f"{dest}: no {LOCK_NAME}; run `bake fetch` into it before sealing")
    table = _table(assets)
    links = _links(table, assets)
    serve = serve_text(dest, assets, table, links).encode()
    root = str(dest)
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

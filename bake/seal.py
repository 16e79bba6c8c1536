"""The image seal: the consumers' alias links, the Hub's layout, ``bake.serve`` and read-only modes."""

from __future__ import annotations

import os
from pathlib import Path

from bake import consumers
from bake.errors import UsageError
from bake.hub import layout as hub_layout
from bake.index import LOCK_NAME, LockedFile, add_to_index, install_together, read_lock
from bake.manifest import Asset, Assets, declared_consumers

FILE_MODE = 0o444
DIR_MODE = 0o555


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
    add_to_index(dest, hub_layout.write(dest, assets))  # the Hub's snapshot links, refs and trees
    serve = serve_text(dest, assets).encode()
    serve_path = dest / consumers.SERVE_NAME
    if not serve_path.is_file() or serve_path.read_bytes() != serve:
        install_together({serve_path: serve})
    for path in sorted(dest.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if not path.is_symlink():
            path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)
    dest.chmod(DIR_MODE)


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

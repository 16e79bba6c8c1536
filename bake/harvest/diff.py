"""``bake harvest --diff ROOT``: what a run's caches hold that a sealed asset root (or an image) lacks.

A sealed root says what it bakes in two files seal wrote: ``bake.lock.json`` (every file's path and
sha256) and ``bake.serve`` (for the Hub, which snapshot file links to which blob). A cached asset is
baked when the lock holds its path with its sha256, whether or not harvest could pin it (a checkpoint
no installed table names, a copy the entrypoint seeded is baked all the same); a cached Hub file when
the served tree links ``<repo folder>/snapshots/<commit>/<path>`` to a blob the lock holds with that
sha256.

ROOT is a directory, or an image reference read with the docker SDK (the ``[registry]`` extra):
one the engine has, or one that names its registry host (``registry.example/ci/assets:TAG``),
which the engine may pull from there. Anything else is exit 2 before any pull: a reference with
no host (``build/assets``, a directory not built yet or a typo) would come from Docker Hub, a
namespace anyone can register, so it is never pulled.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

from bake import servefile
from bake.errors import FetchError, UsageError
from bake.harvest.caches import Found, sha256_of
from bake.hub.entry import PREFIX as HUB_PREFIX
from bake.index import LOCK_NAME, read_lock
from bake.reference import host_of, image_problem


def _baked(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(path -> sha256 of every locked file, Hub snapshot name -> the blob path it links to)."""
    locked = {
        f.path: f.sha256 for f in read_lock(root, "give a sealed asset root, or an image that holds one")
    }
    serve = root / servefile.NAME
    links: dict[str, str] = {}
    if serve.is_file():
        try:
            records = servefile.read(serve.read_text(encoding="utf-8")).records
        except (OSError, ValueError) as exc:
            raise UsageError(f"{serve}: not a bake.serve seal wrote ({exc})") from None
        for r in records:
            if isinstance(r, servefile.Link) and r.consumer == HUB_PREFIX:
                to = servefile.resolve_link(r.name, r.target)
                if to is not None:
                    links[r.name] = f"{HUB_PREFIX}/{to}"
    return locked, links


def _image_root(ref: str, into: Path) -> Path:
    """Copy the image's lock and bake.serve into ``into``; return it.

    Raises UsageError when ``ref`` is no image the engine has and names no registry host (nothing
    is pulled), FetchError when the image cannot be read.
    """
    local = host_of(ref) is None
    hint = (
        "give a sealed asset root that exists, an image the engine has, or one named with its registry "
        f"host (REGISTRY/{ref}; docker.io/{ref} for Docker Hub)"
    )
    try:
        from bake.testing.image import ImageError, ImageUnderTest, NotInEngine
    except ImportError:
        raise UsageError(
            f"--diff {ref}: not a directory, and reading an image needs the [registry] extra"
        ) from None
    try:
        image = ImageUnderTest(ref)
        for name in (LOCK_NAME, servefile.NAME):
            data = image.read_file(f"{image.asset_root}/{name}")
            if data is not None:
                (into / name).write_bytes(data)
    except NotInEngine:
        raise UsageError(
            f"--diff {ref}: not a directory, and not an image the engine has; bake pulls only an image "
            f"named with its registry host, and this one would come from Docker Hub: {hint}"
        ) from None
    except ImageError as exc:
        if local:  # an engine that cannot be asked has no image of that name either
            raise UsageError(f"--diff {ref}: not a directory, and {exc}; {hint}") from None
        raise FetchError(f"--diff {ref}: {exc}") from None
    return into


def _root_problem(root: str) -> str | None:
    """Why ROOT can be neither a directory nor an image reference (None when it may be one), asked
    before any engine is: a path (``/``, ``.``, ``~``) that is no directory, or no reference."""
    if Path(root).is_dir():
        return None
    what = "not a directory" if os.path.lexists(root) else "not a directory (nothing is there)"
    if root.startswith(("/", ".", "~")):
        return what
    problem = image_problem(root)
    return f"{what}, and no image reference ({problem})" if problem else None


def read_root(root: str) -> tuple[dict[str, str], dict[str, str]]:
    """What ROOT (a sealed directory, or an image) bakes: (path -> sha256 of every locked file, Hub
    snapshot name -> the blob path it links to). Raises UsageError or FetchError."""
    problem = _root_problem(root)
    if problem:
        raise UsageError(f"--diff {root}: {problem}; give a sealed asset root that exists, or an image")
    with tempfile.TemporaryDirectory(prefix="bake-harvest-") as scratch:
        path = Path(root) if Path(root).is_dir() else _image_root(root, Path(scratch))
        return _baked(path)


def _baked_anyway(problem, locked: dict[str, str]) -> bool:
    """Is a file harvest could not pin baked all the same: the lock holds its path with its sha256?"""
    if problem.asset_path not in locked:
        return False
    try:
        return sha256_of(problem.where) == locked[problem.asset_path]
    except (OSError, ValueError):
        return False


def missing(found: Found, locked: dict[str, str], links: dict[str, str]) -> Found:
    """Return what ``found`` holds that a root (``read_root``) does not bake, its problems carried along."""
    lacking = Found(problems=[p for p in found.problems if not _baked_anyway(p, locked)])
    lacking.assets = [a for a in found.assets if locked.get(a.path) != a.sha256]
    for c in found.commits:
        files = tuple(
            f
            for f in c.files
            if locked.get(links.get(f"{c.folder}/snapshots/{c.commit}/{f.path}", "")) != f.sha256
        )
        if files:
            lacking.commits.append(replace(c, files=files))
    return lacking

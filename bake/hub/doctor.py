"""``bake doctor`` for the Hub: will huggingface_hub find each baked snapshot file where it looks, offline?

It reads the sealed tree under ``<assets>/hub`` (the image holds no manifest),
resolves the cache directory exactly as huggingface_hub's ``constants`` does
(HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE, then HF_HOME/hub, then
``${XDG_CACHE_HOME:-~/.cache}/huggingface/hub``), and checks each snapshot file and
ref there. A file that is not the baked one itself is hashed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from bake.hashes import sha256_file
from bake.hubtable import PREFIX

CONSUMER = "huggingface_hub"


def hub_cache_dir(environ: Mapping[str, str]) -> Path:
    """The directory huggingface_hub uses as its cache under ``environ`` (an empty value counts, as there)."""
    xdg = environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    home = os.path.expandvars(os.path.expanduser(environ.get("HF_HOME", os.path.join(xdg, "huggingface"))))
    legacy = environ.get("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(os.path.abspath(os.path.expandvars(os.path.expanduser(environ.get("HF_HUB_CACHE", legacy)))))


def _file_finding(baked: Path, lookup: Path, name: str) -> tuple[str, str, bool, str]:
    if not lookup.is_file():
        seen = (
            "a dangling link" if lookup.is_symlink() else "nothing" if not lookup.exists() else "not a file"
        )
        return (CONSUMER, name, False, f"looks at {lookup}, finds {seen}; it would download")
    same = os.path.realpath(lookup) == os.path.realpath(baked)
    if not same and (
        lookup.stat().st_size != baked.stat().st_size or sha256_file(lookup) != sha256_file(baked)
    ):
        return (CONSUMER, name, False, f"{lookup} is not the baked file; it would use other bytes")
    return (CONSUMER, name, True, f"{lookup} is served")


def findings(assets_root: Path, environ: Mapping[str, str]) -> list[tuple[str, str, bool, str]]:
    """Return (consumer, path, ok, detail) for every baked snapshot file and ref.

    Empty when nothing is baked under ``hub/`` or huggingface_hub is not installed.
    """
    baked_root = Path(assets_root) / PREFIX
    if not baked_root.is_dir() or importlib.util.find_spec("huggingface_hub") is None:
        return []
    cache = hub_cache_dir(environ)
    out = []
    for repo in sorted(p for p in baked_root.iterdir() if p.is_dir() and "--" in p.name):
        for link in sorted((repo / "snapshots").rglob("*")):
            if link.is_symlink() or link.is_file():
                rel = link.relative_to(baked_root)
                out.append(_file_finding(link, cache / rel, f"{PREFIX}/{rel}"))
        for ref in sorted(p for p in (repo / "refs").rglob("*") if p.is_file()):
            rel = ref.relative_to(baked_root)
            lookup = cache / rel
            commit = ref.read_text(encoding="utf-8")
            seen = lookup.read_text(encoding="utf-8") if lookup.is_file() else None
            ok = seen == commit
            detail = (
                f"{lookup} names {commit}"
                if ok
                else f"{lookup} names {seen or 'nothing'}, the image {commit}; pass revision={commit!r} "
                "(the node's entry is never changed)"
            )
            out.append((CONSUMER, f"{PREFIX}/{rel}", ok, detail))
    return out

"""The built-in consumers' naming rules: which path each library looks for, given a URL or a cached name.

``manifest`` checks each entry's path against its consumer's rule, ``bake add`` derives
a path from a URL, ``seal`` makes tiktoken's alias links and ``bake harvest`` names the
files it finds in a job's caches. Each rule takes the consumer's ``prefix`` (``<name>/``);
the table (``bake.consumers.entries``) says which rule is whose.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Protocol

from bake.consumers import libraries, vllm_assets
from bake.errors import ManifestError


class AssetLike(Protocol):
    """What the table needs of a manifest asset (``bake.asset.Asset``)."""

    name: str
    path: str
    sha256: str
    urls: tuple[str, ...]

    def canonical_url(self) -> str | None: ...


def s3tokenizer_check(prefix: str, asset: AssetLike, where: str) -> None:
    """Raise ManifestError unless the path is ``s3tokenizer/<model>.onnx``."""
    parts = PurePosixPath(asset.path).parts
    if len(parts) != 2 or not parts[1].endswith(".onnx") or parts[1] == ".onnx":
        raise ManifestError(
            f"{where}: path {asset.path!r} must be {prefix}<model>.onnx, "
            "the name s3tokenizer.load_model() looks for"
        )


def s3tokenizer_path(prefix: str, url: str) -> str | None:
    """The path of the model s3tokenizer's own table downloads from ``url``, or None."""
    models = libraries.s3tokenizer_models() or {}
    model = next((m for m, (u, _) in models.items() if u == url), None)
    return f"{prefix}{model}.onnx" if model else None


def sha1_name(url: str) -> str:
    """The cache file name tiktoken and tiktoken-rs give a URL."""
    return hashlib.sha1(url.encode()).hexdigest()


def tiktoken_check(prefix: str, asset: AssetLike, where: str) -> None:
    """Raise ManifestError unless the path is ``tiktoken/<sha1 of the canonical url>``."""
    canonical = asset.canonical_url()
    if canonical is None:
        raise ManifestError(
            f"{where}: a tiktoken/ asset needs an https:// url; its cache name is "
            "the SHA-1 of that canonical url"
        )
    expected = prefix + sha1_name(canonical)
    if asset.path != expected:
        raise ManifestError(
            f"{where}: path {asset.path!r} is not the SHA-1 of its canonical url "
            f"{canonical!r}; expected path {expected!r}"
        )


def tiktoken_path(prefix: str, url: str) -> str | None:
    """The cache name of a vocab URL (a ``.tiktoken`` file, or one tiktoken's own table lists), or None."""
    vocab = url.startswith("https://") and url.rsplit("/", 1)[-1].endswith(".tiktoken")
    return prefix + sha1_name(url) if vocab or url in (libraries.tiktoken_hashes() or {}) else None


def tiktoken_cached_name(name: str, partial: re.Pattern[str]) -> bool:
    """Is ``name`` a vocab tiktoken cached (``<sha1(url)>``) or is caching (``partial``)?"""
    return bool(re.fullmatch(r"[0-9a-f]{40}", name) or partial.match(name))


def tiktoken_aliases(prefix: str, assets: Iterable[AssetLike]) -> dict[str, str]:
    """``tiktoken/<encoding>.tiktoken`` links, for ``TIKTOKEN_ENCODINGS_BASE`` readers."""
    links = {}
    for asset in assets:
        canonical = asset.canonical_url()
        alias = canonical.rsplit("/", 1)[-1] if canonical else ""
        if alias.endswith(".tiktoken"):
            links[prefix + alias] = PurePosixPath(asset.path).name
    return links


def hub_check(prefix: str, asset: AssetLike, where: str) -> None:
    """Raise ManifestError: the Hub's paths are seal's, from ``[[hub]]`` entries, never an asset's own."""
    raise ManifestError(
        f"{where}: path {asset.path!r} is under {prefix}, kept for [[hub]] entries; "
        "pin a repository with `bake add hf://ORG/REPO`"
    )


def vllm_check(prefix: str, asset: AssetLike, where: str) -> None:
    """Raise ManifestError unless the path is ``vllm_public_assets/<file>``, the file its URL names."""
    name = asset.path[len(prefix) :]
    leaf = name.rsplit("/", 1)[-1]
    if "/" in name:
        raise ManifestError(
            f"{where}: path {asset.path!r} is not where vLLM looks: get_vllm_public_assets drops the "
            f"bucket prefix and reads {prefix}{leaf}; write path = {prefix + leaf!r}"
        )
    for url in asset.urls:
        found = vllm_assets.bucket_file(url)
        if found and found[1] != name:
            raise ManifestError(
                f"{where}: path {asset.path!r} is not where vLLM keeps {url}: it caches that file as "
                f"{prefix}{found[1]}; write path = {prefix + found[1]!r}, or list that "
                f"file's own url"
            )


def vllm_path(prefix: str, url: str) -> str | None:
    """The path vLLM caches a file of its bucket under (the bucket prefix dropped), or None."""
    found = vllm_assets.bucket_file(url)
    return f"{prefix}{found[1]}" if found else None


def vllm_url_for_cached(name: str) -> str | None:
    """The URL the installed vLLM itself fetches ``name`` from: when exactly one asset class asks for it."""
    lib = vllm_assets.installed()
    classes = lib.classes_for(name) if lib else []
    return lib.url(classes[0], name) if lib and len(classes) == 1 else None


def vllm_why_unnamed(prefix: str, name: str) -> str:
    """Why no URL names the cached ``name``: what vLLM's classes say of it, or that vLLM is not here."""
    lib = vllm_assets.installed()
    if lib is None:
        prefixes = " or ".join(f"{p}/" for p in vllm_assets.RULE_PREFIXES)
        return (
            f"vllm is not installed here, so its asset classes cannot say under which bucket prefix "
            f"({prefixes}) {name} was fetched, and no manifest entry lists it; pin it with `bake add "
            f"{vllm_assets.BUCKET}/<prefix>/{name}`, or harvest where vLLM is installed"
        )
    classes = lib.classes_for(name)
    seen = " and ".join(c.name for c in classes) + " all ask for it" if classes else "none asks for it"
    return (
        f"vLLM {lib.version}'s asset classes ({lib.describe()}): {seen}, and no manifest entry lists it; "
        f"pin it with `bake add URL --path {prefix}{name}`"
    )

"""The installed libraries' own tables (s3tokenizer's models, tiktoken's vocab hashes), read from source.

Importing s3tokenizer imports torch, so neither library is ever imported: their
modules are found by ``importlib.util.find_spec`` and parsed with ``ast``. Each table
is read once per process and cached (a command asks it once per asset); a caller that
installs or removes a library while it runs clears it (``s3tokenizer_models.cache_clear()``).
vLLM's asset classes are read the same way, in ``bake.consumers.vllm_assets``.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
from pathlib import Path


def module_source(module: str) -> Path | None:
    """Return the file of an installed module without importing it (s3tokenizer imports torch)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def installed(distribution: str) -> bool:
    """Is ``distribution`` installed where bake runs (asked of its metadata, never imported)?"""
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@functools.cache
def s3tokenizer_models() -> dict[str, tuple[str, str]] | None:
    """Return s3tokenizer's ``{model: (url, sha256)}`` read from its source by ``ast``, or None.

    Importing s3tokenizer imports torch, so the module is parsed, never run. Read once
    per process: the dict returned is shared, so callers only read it.
    """
    origin = module_source("s3tokenizer")
    if origin is None:
        return None
    found: dict[str, dict] = {}
    for node in ast.parse(origin.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in ("_MODELS", "_SHA256S"):
            found[target.id] = ast.literal_eval(node.value)
    models, hashes = found.get("_MODELS", {}), found.get("_SHA256S", {})
    return {name: (url, hashes.get(name, "")) for name, url in models.items()}


@functools.cache
def tiktoken_hashes() -> dict[str, str] | None:
    """Return tiktoken's ``{url: expected sha256}`` from ``tiktoken_ext.openai_public``, or None.

    Read once per process: the dict returned is shared, so callers only read it.
    """
    origin = module_source("tiktoken_ext.openai_public")
    if origin is None:
        return None
    hashes = {}
    for node in ast.walk(ast.parse(origin.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "load_tiktoken_bpe":
            url = node.args[0] if node.args else None
            expected = next((k.value for k in node.keywords if k.arg == "expected_hash"), None)
            if isinstance(url, ast.Constant) and isinstance(expected, ast.Constant):
                hashes[url.value] = expected.value
    return hashes

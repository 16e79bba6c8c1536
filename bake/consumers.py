"""What the consumer libraries expect: their URL/hash tables and where they look at run time."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bake.hashes import sha256_file
from bake.lockfile import LockedFile
from bake.manifest import Asset


@dataclass(frozen=True)
class Finding:
    """One consumer's verdict on one baked file."""

    consumer: str
    asset: str
    ok: bool
    detail: str


def _module_source(module: str) -> Path | None:
    """Return the file of an installed module without importing it (s3tokenizer imports torch)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def s3tokenizer_table() -> dict[str, tuple[str, str]] | None:
    """Return s3tokenizer's ``{model: (url, sha256)}`` read from its source by ``ast``, or None.

    Importing s3tokenizer imports torch, so the module is parsed, never run.
    """
    origin = _module_source("s3tokenizer")
    if origin is None:
        return None
    tables: dict[str, dict] = {}
    for node in ast.parse(origin.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in ("_MODELS", "_SHA256S"):
            tables[target.id] = ast.literal_eval(node.value)
    models, hashes = tables.get("_MODELS", {}), tables.get("_SHA256S", {})
    return {name: (url, hashes.get(name, "")) for name, url in models.items()}


def tiktoken_table() -> dict[str, str] | None:
    """Return tiktoken's ``{url: expected sha256}`` from ``tiktoken_ext.openai_public``, or None."""
    origin = _module_source("tiktoken_ext.openai_public")
    if origin is None:
        return None
    table = {}
    for node in ast.walk(ast.parse(origin.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "load_tiktoken_bpe":
            url = node.args[0] if node.args else None
            expected = next((k.value for k in node.keywords if k.arg == "expected_hash"), None)
            if isinstance(url, ast.Constant) and isinstance(expected, ast.Constant):
                table[url.value] = expected.value
    return table


def check_manifest(assets: list[Asset]) -> list[Finding]:
    """Compare manifest entries with the installed consumers' own tables.

    Returns one finding per asset a consumer knows about; an empty list when
    no consumer is installed.
    """
    findings = []
    s3_table = s3tokenizer_table()
    tk_table = tiktoken_table()
    for asset in assets:
        kind = PurePosixPath(asset.path).parts[0]
        if kind == "s3tokenizer" and s3_table is not None:
            model = PurePosixPath(asset.path).stem
            if model not in s3_table:
                findings.append(
                    Finding("s3tokenizer", asset.name, False, f"model {model!r} is not in its table")
                )
                continue
            url, sha = s3_table[model]
            problems = []
            if sha != asset.sha256:
                problems.append(f"sha256 {asset.sha256} in the manifest, {sha} in s3tokenizer")
            if url not in asset.urls:
                problems.append(f"s3tokenizer downloads {url}, which the manifest does not list")
            findings.append(
                Finding("s3tokenizer", asset.name, not problems, "; ".join(problems) or "matches")
            )
        elif kind == "tiktoken" and tk_table is not None:
            canonical = asset.canonical_url()
            if canonical not in tk_table:
                findings.append(Finding("tiktoken", asset.name, False, f"{canonical} is not in its table"))
                continue
            expected = tk_table[canonical]
            ok = expected == asset.sha256
            detail = "matches" if ok else f"sha256 {asset.sha256} in the manifest, {expected} in tiktoken"
            findings.append(Finding("tiktoken", asset.name, ok, detail))
    return findings


def s3tokenizer_root() -> Path:
    """Return where ``s3tokenizer.load_model`` looks, resolved as it resolves it."""
    default = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.abspath(os.path.join(os.getenv("XDG_CACHE_HOME", default), "s3tokenizer")))


def harmony_cache_dir() -> Path:
    """Return where openai-harmony (tiktoken-rs) looks for vocab files."""
    configured = os.environ.get("TIKTOKEN_RS_CACHE_DIR")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "tiktoken-rs-cache"


def tiktoken_cache_dir() -> Path | None:
    """Return where tiktoken looks for vocab files; None when caching is disabled."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return Path(os.environ[var]) if os.environ[var] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _check_lookup(consumer: str, name: str, lookup: Path, expected: str, *, hash_it: bool) -> Finding:
    if not lookup.is_file():
        seen = (
            "a dangling link" if lookup.is_symlink() else "nothing" if not lookup.exists() else "not a file"
        )
        return Finding(consumer, name, False, f"looks at {lookup}, finds {seen}; it would download")
    if hash_it:
        actual = sha256_file(lookup)
        if actual != expected:
            return Finding(
                consumer, name, False, f"{lookup} has sha256 {actual}, expected {expected}; it would download"
            )
    return Finding(consumer, name, True, f"{lookup} is served")


def doctor(assets_root: Path, baked: list[LockedFile]) -> list[Finding]:
    """Check, offline, that each installed consumer accepts the baked file where it will look.

    Returns one finding per (consumer, baked file); an empty list when no consumer is installed.
    """
    findings = []
    s3_table = s3tokenizer_table()
    harmony = _installed("openai-harmony")
    tiktoken = _installed("tiktoken")
    for entry in baked:
        parts = PurePosixPath(entry.path).parts
        if parts[0] == "s3tokenizer" and s3_table is not None:
            model = PurePosixPath(entry.path).stem
            table_sha = s3_table.get(model, ("", ""))[1]
            if table_sha != entry.sha256:
                findings.append(
                    Finding(
                        "s3tokenizer",
                        entry.path,
                        False,
                        f"its table expects sha256 {table_sha or '(no entry)'}, "
                        f"the baked file is {entry.sha256}; it would re-download",
                    )
                )
                continue
            lookup = s3tokenizer_root() / parts[-1]
            # A link to the baked file is already proven by the lock; anything else is hashed.
            same = lookup.exists() and lookup.resolve() == (assets_root / entry.path).resolve()
            findings.append(_check_lookup("s3tokenizer", entry.path, lookup, entry.sha256, hash_it=not same))
        elif parts[0] == "tiktoken":
            if harmony is not None:
                lookup = harmony_cache_dir() / parts[-1]
                findings.append(
                    _check_lookup("openai-harmony", entry.path, lookup, entry.sha256, hash_it=True)
                )
            if tiktoken is not None:
                cache = tiktoken_cache_dir()
                if cache is None:
                    findings.append(
                        Finding(
                            "tiktoken",
                            entry.path,
                            False,
                            "TIKTOKEN_CACHE_DIR is empty: caching off, it downloads",
                        )
                    )
                else:
                    findings.append(
                        _check_lookup("tiktoken", entry.path, cache / parts[-1], entry.sha256, hash_it=True)
                    )
    return findings

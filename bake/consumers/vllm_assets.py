"""vLLM's public test assets: where an installed vLLM looks for them, and each asset class's bucket prefix.

``vllm.assets.base.get_vllm_public_assets(filename, s3_prefix)`` reads
``$VLLM_ASSETS_CACHE/vllm_public_assets/<filename>`` and, when nothing exists there, downloads
``<bucket>/<s3_prefix>/<filename>`` into it: the prefix is dropped from the cached name. Each
asset class passes its own prefix (``ImageAsset``: ``vision_model_images``; ``AudioAsset``:
``multimodal_asset``). The consumer table (``bake.consumers``) holds the rule; this module reads
the installed vLLM, when there is one, to say what that vLLM itself does. Importing vllm imports
torch, so nothing here imports it: the asset modules are parsed with ``ast``, and ``vllm/envs.py``
(standard library only) runs alone in a child interpreter with the job's environment.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# The rule, as released vLLM has it (0.34.0: vllm/assets/base.py, image.py, audio.py).
BUCKET = "https://vllm-public-assets.s3.us-west-2.amazonaws.com"
DIRECTORY = "vllm_public_assets"
RULE_PREFIXES = ("vision_model_images", "multimodal_asset")
FUNCTION = "get_vllm_public_assets"
# Runs vLLM's envs.py alone (it imports only the standard library) and prints the directory.
_ENVS_PROBE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_bake_vllm_envs', sys.argv[1])\n"
    "envs = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(envs)\n"
    "print(envs.VLLM_ASSETS_CACHE)\n"
)


class VllmCodeError(Exception):
    """The installed vLLM's own code could not say where it looks (doctor then uses the rule)."""


@dataclass(frozen=True)
class AssetClass:
    """One vLLM asset class: the bucket prefix it fetches under, the names it takes, its suffixes.

    ``suffixes`` is None when the class takes any extension (``ImageAsset.get_path(ext)``).
    """

    name: str
    prefix: str
    names: tuple[str, ...]
    suffixes: tuple[str, ...] | None

    def asks_for(self, filename: str) -> bool:
        stem, dot, suffix = filename.rpartition(".")
        return bool(dot) and stem in self.names and (self.suffixes is None or f".{suffix}" in self.suffixes)

    def describe(self) -> str:
        shown = ", ".join(self.names[:4]) + (f", … ({len(self.names)} names)" if len(self.names) > 4 else "")
        suffix = "|".join(self.suffixes) if self.suffixes else ".<ext>"
        return f"{self.name} <name>{suffix} under {self.prefix}/ ({shown})"


@dataclass(frozen=True)
class Installed:
    """The installed vLLM, as its source says: version, envs.py, bucket, cache directory name, classes."""

    version: str
    envs: Path
    bucket: str
    directory: str
    classes: tuple[AssetClass, ...]

    def classes_for(self, filename: str) -> list[AssetClass]:
        """The asset classes that ask for ``filename``: one, none, or (a clash of names) several."""
        return [c for c in self.classes if c.asks_for(filename)]

    def describe(self) -> str:
        return "; ".join(c.describe() for c in self.classes) or "no asset class found in vllm/assets/"

    def url(self, cls: AssetClass, filename: str) -> str:
        return f"{self.bucket}/{cls.prefix}/{filename}"

    def cache_dir(self, environ: Mapping[str, str]) -> Path:
        """Return ``envs.VLLM_ASSETS_CACHE`` as this vLLM computes it under ``environ``, absolute.

        A child interpreter runs envs.py with exactly ``environ`` (``-I``: no PYTHON* variable,
        no user site). Raises VllmCodeError when it fails.
        """
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-c", _ENVS_PROBE, str(self.envs)],
                env=dict(environ),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise VllmCodeError(f"running {self.envs} failed: {exc}") from None
        lines = proc.stdout.splitlines()
        if proc.returncode != 0 or len(lines) != 1:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise VllmCodeError(f"{self.envs} exited {proc.returncode}: {tail}")
        return Path(os.path.abspath(lines[0]))


def bucket_file(url: str) -> tuple[str, str] | None:
    """(prefix, file name) of a URL in vLLM's bucket, or None for any other URL."""
    if not url.startswith(BUCKET + "/") or any(c in url for c in "?#"):
        return None
    prefix, _, name = url[len(BUCKET) + 1 :].rpartition("/")
    return (prefix, name) if name not in ("", ".", "..") else None


def installed() -> Installed | None:
    """Return the installed vLLM read from its source, or None when there is none (or no asset code)."""
    try:
        spec = importlib.util.find_spec("vllm")  # a top-level name: finding it imports nothing
    except (ImportError, ValueError):
        return None
    for place in (spec.submodule_search_locations or []) if spec else []:
        package = Path(place)
        if (package / "envs.py").is_file() and (package / "assets" / "base.py").is_file():
            return _read(str(package), _version())
    return None


def _version() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


@functools.lru_cache(maxsize=8)
def _read(package: str, version: str) -> Installed:
    base = ast.parse(Path(package, "assets", "base.py").read_text(encoding="utf-8"))
    bucket = next((v for v in _strings(base).values() if v.startswith("https://")), BUCKET)
    classes = tuple(
        found
        for module in sorted(Path(package, "assets").glob("*.py"))
        for found in _classes(ast.parse(module.read_text(encoding="utf-8")))
    )
    return Installed(version, Path(package, "envs.py"), bucket.rstrip("/"), _directory(base), classes)


def _strings(tree: ast.Module) -> dict[str, str]:
    """The module's top-level ``NAME = "text"`` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _directory(base: ast.Module) -> str:
    """The directory ``get_vllm_public_assets`` joins to the cache: ``get_cache_dir() / "<it>"``."""
    for node in base.body:
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
            for sub in ast.walk(node):
                right = sub.right if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Div) else None
                if isinstance(right, ast.Constant) and isinstance(right.value, str):
                    return right.value
    return DIRECTORY


def _literals(node: ast.AST | None, aliases: Mapping[str, ast.AST]) -> tuple[str, ...]:
    """The strings of a ``Literal[...]`` annotation, through a module-level alias."""
    if isinstance(node, ast.Name) and node.id in aliases:
        node = aliases[node.id]
    if isinstance(node, ast.Subscript):
        return tuple(
            c.value for c in ast.walk(node.slice) if isinstance(c, ast.Constant) and isinstance(c.value, str)
        )
    return ()


def _suffixes(cls: ast.ClassDef) -> tuple[str, ...] | None:
    """The suffixes of the class's ``f"{self.name}.<ext>"`` names; None when one takes any extension."""
    found = []
    for node in ast.walk(cls):
        parts = node.values if isinstance(node, ast.JoinedStr) else []
        first = parts[0] if parts else None
        if not (isinstance(first, ast.FormattedValue) and ast.unparse(first.value) == "self.name"):
            continue
        rest = parts[1:]
        if len(rest) == 1 and isinstance(rest[0], ast.Constant) and str(rest[0].value).startswith("."):
            found.append(rest[0].value)
        else:
            return None
    return tuple(dict.fromkeys(found)) or None


def _classes(tree: ast.Module) -> list[AssetClass]:
    """Each class of the module that calls get_vllm_public_assets with an ``s3_prefix``."""
    strings = _strings(tree)
    aliases = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        prefixes = {
            strings.get(k.value.id) if isinstance(k.value, ast.Name) else getattr(k.value, "value", None)
            for call in ast.walk(cls)
            if isinstance(call, ast.Call) and ast.unparse(call.func).endswith(FUNCTION)
            for k in call.keywords
            if k.arg == "s3_prefix"
        }
        annotation = next(
            (
                n.annotation
                for n in cls.body
                if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "name"
            ),
            None,
        )
        names = _literals(annotation, aliases)
        if len(prefixes) == 1 and isinstance(prefix := prefixes.pop(), str) and names:
            found.append(AssetClass(cls.name, prefix, names, _suffixes(cls)))
    return found

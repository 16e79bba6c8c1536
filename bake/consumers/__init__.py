"""The consumer table: each library that looks for baked files in its own places, as one entry of data.

A consumer owns the assets under ``<name>/``. Its entry says how those paths
are named, which alias links ``seal`` makes beside them, where the library
looks (``bake.locations``), how ``manifest check`` reads the library's own
URL/hash table and how ``doctor`` checks a job. The built-ins are s3tokenizer,
the tiktoken family, the Hugging Face Hub and vLLM's public test assets; a manifest declares more
with ``[[consumer]]``.
Everything else in bake (manifest rules, seal, verify, doctor, manifest check,
``bake add``) and, through ``bake.serve``, the entrypoint reads this table.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from bake import servefile
from bake.consumers import vllm_assets
from bake.errors import ManifestError
from bake.hashes import sha256_file
from bake.hub import layout
from bake.hub.entry import PREFIX as HUB_PREFIX
from bake.hub.entry import HubEntry
from bake.locations import Location, parse_location
from bake.tomlkeys import expect_mapping, refuse_unknown_keys

SERVE_NAME = servefile.NAME
SERVE_HEADER = servefile.HEADER
# bake's own directory inside each location a consumer with no lock layout of its own serves:
# its lock, stamps and partials (docs/SERVE_FORMAT.md).
STATE = ".bake"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONSUMER_KEYS = {"name", "locations"}


class AssetLike(Protocol):
    """What the table needs of a manifest asset (``bake.asset.Asset``)."""

    name: str
    path: str
    sha256: str
    urls: tuple[str, ...]

    def canonical_url(self) -> str | None: ...


class BakedFile(Protocol):
    """What the table needs of a baked file (``bake.index.LockedFile``)."""

    path: str
    size: int | None
    sha256: str


@dataclass(frozen=True)
class Finding:
    """One library's (or declared consumer's) verdict on one file: ``consumer`` is the name doctor and
    ``manifest check`` both print. ``mismatch`` marks a verdict of the library's own table (MISMATCH);
    a failing lookup is WOULD DOWNLOAD. ``expected`` and ``seen`` are the sha256s compared, if any."""

    consumer: str
    asset: str
    ok: bool
    detail: str
    mismatch: bool = False
    expected: str | None = None
    seen: str | None = None

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else "MISMATCH" if self.mismatch else "WOULD DOWNLOAD"


# Why doctor could not ask a library that is not installed; the lookup was still checked.
NOT_INSTALLED = "not installed, so its own table was not asked; its lookup was checked against the lock"


def _module_source(module: str) -> Path | None:
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


def _no_file(client: str, name: str, lookup: Path) -> Finding | None:
    """The failing finding when ``lookup`` is no file (nothing, a dangling link, a directory); else None."""
    if lookup.is_file():
        return None
    seen = "a dangling link" if lookup.is_symlink() else "nothing" if not lookup.exists() else "not a file"
    return Finding(client, name, False, f"looks at {lookup}, finds {seen}; it would download")


def _check_lookup(consumer: str, name: str, lookup: Path, baked: Path, sha256: str) -> Finding:
    """Is the file at ``lookup`` the baked one? A link to the baked file is proven by the lock; else hash."""
    missing = _no_file(consumer, name, lookup)
    if missing:
        return missing
    if lookup.resolve() != baked.resolve():
        actual = sha256_file(lookup)
        if actual != sha256:
            detail = f"{lookup} has sha256 {actual}, expected {sha256}; it would download"
            return Finding(consumer, name, False, detail, expected=sha256, seen=actual)
    return Finding(consumer, name, True, f"{lookup} is served")


def _table_mismatch(library: str, f: BakedFile, expected: str, what: str) -> Finding:
    """The MISMATCH finding of a baked file whose sha256 is not the one ``library``'s own table holds."""
    detail = (
        f"its table expects sha256 {expected} for {what}, the baked file is {f.sha256}; it would re-download"
    )
    return Finding(library, f.path, False, detail, mismatch=True, expected=expected, seen=f.sha256)


class Consumer:
    """One entry of the table. The base class is a declared consumer: nested names, no library table.

    Subclasses (the built-ins) override the naming rule, the alias links, the
    library's own table and the doctor's view; the Hub, with a layout of its own,
    also overrides the files seal writes and the records it serves.
    """

    builtin = False
    # The distributions whose own lookups `bake doctor` checks; a declared consumer names none.
    libraries: tuple[str, ...] = ()
    # Those among them whose own sha256 table `manifest check` and `doctor` read.
    tables: tuple[str, ...] = ()
    # The loc IDs of a location's fallbacks, by variable (a consumer with a precedence of its own).
    chain_ids: Mapping[str, str] = {}
    # The library's own "never download" switches, (VAR, VALUE) with VALUE a word or @PATH in the asset
    # root: seal writes them to bake.offline, the entrypoint exports them under BAKE_OFFLINE=1.
    offline: tuple[tuple[str, str], ...] = ()
    # An entry `bake add` or `bake harvest` names keeps its file's suffix (vLLM's stop_sign.jpg and
    # stop_sign.pt are two assets); else the name is the file's stem (a model's name).
    names_keep_suffix = False
    # A name a download still in progress has in one of its locations, and why it is not a file to pin.
    partial = re.compile(r"\.(?:tmp|part|incomplete)\Z")
    partial_why = "a partial download (its name ends .tmp, .part or .incomplete): let the job finish it"
    # The libraries' default directories (under TMPDIR), which name a cache of theirs by its place.
    default_dirs: tuple[str, ...] = ()

    def __init__(self, name: str, locations: Sequence[Location]) -> None:
        self.name = name
        self.locations = tuple(locations)

    @property
    def prefix(self) -> str:
        return f"{self.name}/"

    def owns(self, path: str) -> bool:
        return path.startswith(self.prefix)

    def name_in_location(self, path: str) -> str:
        """Return the file's relative path inside each location (the path below the prefix)."""
        return path[len(self.prefix) :]

    def check_path(self, asset: AssetLike, where: str) -> None:
        """Raise ManifestError when ``asset`` breaks this consumer's naming rule (declared: any name)."""

    def path_for_url(self, url: str) -> str | None:
        """Return the manifest path ``bake add`` gives this URL, or None when it is not this consumer's."""
        return None

    def known_urls(self) -> tuple[str, ...]:
        """The URLs the installed library's own table downloads from (``bake harvest`` names files so)."""
        return ()

    def url_for_cached(self, name: str) -> str | None:
        """The URL the installed library itself would have fetched the cached file ``name`` from, or None."""
        return None

    def why_unnamed(self, name: str) -> str | None:
        """Why no URL names the cached file ``name``, where the consumer can say more than harvest can."""
        return None

    def cached_name(self, name: str) -> bool:
        """Is ``name`` one this consumer's libraries give the files they cache, whatever its URL?"""
        return False

    def aliases(self, assets: Iterable[AssetLike]) -> dict[str, str]:
        """Map alias link paths (relative to the asset root) to their relative targets."""
        return {}

    def seal_files(self) -> dict[str, str]:
        """Map the small files ``seal`` writes itself (paths relative to the asset root) to their text."""
        return {}

    def library_sha256(self, asset: AssetLike) -> str | None:
        """Return the sha256 the installed library itself expects for ``asset``, or None if it has none."""
        return None

    def check_entry(self, asset: AssetLike) -> Finding | None:
        """Compare one manifest entry with the library's own table; None when there is nothing to compare."""
        return None

    def not_asked(self) -> list[tuple[str, str]]:
        """(library, why) for each of its libraries doctor cannot ask here: those not installed."""
        return [(lib, NOT_INSTALLED) for lib in self.libraries if not installed(lib)]

    def declaration(self) -> dict:
        """Return the consumer as the manifest declares it (what the manifest digest covers)."""
        return {"name": self.name, "locations": [str(loc) for loc in self.locations]}

    def loc_ids(self) -> list[str]:
        return [f"{self.name}.{i}" for i in range(len(self.locations))]

    def loc_records(self) -> list[servefile.Loc]:
        """Return the ``loc`` records of this consumer's locations, each after what its FALLBACK names."""
        return [
            record
            for loc_id, loc in zip(self.loc_ids(), self.locations, strict=True)
            for record in loc.records(loc_id, self.name, self.chain_ids)
        ]

    def serve_records(self, files: Sequence[BakedFile], aliases: Mapping[str, str]) -> list[servefile.Record]:
        """Return this consumer's records of ``bake.serve`` for the baked ``files`` it owns.

        Its locations mirror its asset directory file for file, so the linked view places that
        directory whole; ``aliases`` (link paths from the asset root, seal's) are links beside
        the files that are not served, removed after the placement.
        """
        served = [
            servefile.File(self.name, "both", self.name_in_location(f.path), int(f.size or 0), f.sha256)
            for f in files
        ]
        skips = [self.name_in_location(a) for a in aliases if self.owns(a)]
        parts = servefile.tree_records(self.name, self.name, served, skips)
        shown = servefile.shown(_shown_names(files, aliases))
        return [*self.loc_records(), servefile.served_set(self.name, STATE, self.name, shown, parts), *parts]

    def doctor(self, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]) -> list[Finding]:
        """Check, offline, that each location in this environment holds each baked file."""
        findings = []
        for loc in self.locations:
            where = loc.resolve(environ)
            for f in files:
                if where is None:
                    findings.append(
                        Finding(self.name, f.path, False, f"${loc.var} is unset; run the job through "
                                "bake-entrypoint, which points it at the baked files")
                    )  # fmt: skip
                    continue
                lookup = where / self.name_in_location(f.path)
                findings.append(_check_lookup(self.name, f.path, lookup, root / f.path, f.sha256))
        return findings


def s3tokenizer_models() -> dict[str, tuple[str, str]] | None:
    """Return s3tokenizer's ``{model: (url, sha256)}`` read from its source by ``ast``, or None.

    Importing s3tokenizer imports torch, so the module is parsed, never run.
    """
    origin = _module_source("s3tokenizer")
    if origin is None:
        return None
    found: dict[str, dict] = {}
    for node in ast.parse(origin.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in ("_MODELS", "_SHA256S"):
            found[target.id] = ast.literal_eval(node.value)
    models, hashes = found.get("_MODELS", {}), found.get("_SHA256S", {})
    return {name: (url, hashes.get(name, "")) for name, url in models.items()}


class S3Tokenizer(Consumer):
    """s3tokenizer: ``load_model(name)`` looks for ``<name>.onnx`` and checks its own ``_SHA256S``."""

    builtin = True
    libraries = tables = ("s3tokenizer",)

    def __init__(self) -> None:
        super().__init__("s3tokenizer", [parse_location("${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer", "")])

    def check_path(self, asset: AssetLike, where: str) -> None:
        parts = PurePosixPath(asset.path).parts
        if len(parts) != 2 or not parts[1].endswith(".onnx") or parts[1] == ".onnx":
            raise ManifestError(
                f"{where}: path {asset.path!r} must be s3tokenizer/<model>.onnx, "
                "the name s3tokenizer.load_model() looks for"
            )

    def path_for_url(self, url: str) -> str | None:
        models = s3tokenizer_models() or {}
        model = next((m for m, (u, _) in models.items() if u == url), None)
        return f"{self.prefix}{model}.onnx" if model else None

    def known_urls(self) -> tuple[str, ...]:
        return tuple(url for url, _ in (s3tokenizer_models() or {}).values())

    def library_sha256(self, asset: AssetLike) -> str | None:
        models = s3tokenizer_models() or {}
        return models.get(PurePosixPath(asset.path).stem, ("", ""))[1] or None

    def check_entry(self, asset: AssetLike) -> Finding | None:
        models = s3tokenizer_models()
        if models is None:
            return None
        model = PurePosixPath(asset.path).stem
        if model not in models:
            return Finding(
                self.name, asset.name, False, f"model {model!r} is not in its table", mismatch=True
            )
        url, sha = models[model]
        problems = []
        if sha != asset.sha256:
            problems.append(f"sha256 {asset.sha256} in the manifest, {sha} in s3tokenizer")
        if url not in asset.urls:
            problems.append(f"s3tokenizer downloads {url}, which the manifest does not list")
        detail = "; ".join(problems) or "matches"
        return Finding(
            self.name,
            asset.name,
            not problems,
            detail,
            mismatch=bool(problems),
            expected=sha,
            seen=asset.sha256,
        )

    def doctor(self, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]) -> list[Finding]:
        """Its table's verdict on each file (when s3tokenizer is installed), else where it looks."""
        models = s3tokenizer_models()
        findings = []
        for f in files:
            model = PurePosixPath(f.path).stem
            known_sha = models.get(model, ("", ""))[1] if models is not None else f.sha256
            if known_sha != f.sha256:
                findings.append(_table_mismatch(self.name, f, known_sha or "(no entry)", f"model {model}"))
            else:
                findings += super().doctor(root, [f], environ)
        return findings


def tiktoken_hashes() -> dict[str, str] | None:
    """Return tiktoken's ``{url: expected sha256}`` from ``tiktoken_ext.openai_public``, or None."""
    origin = _module_source("tiktoken_ext.openai_public")
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


def sha1_name(url: str) -> str:
    """The cache file name tiktoken and tiktoken-rs give a URL."""
    return hashlib.sha1(url.encode()).hexdigest()


class Tiktoken(Consumer):
    """The tiktoken family: openai-harmony (tiktoken-rs) and tiktoken cache a vocab as ``<sha1(url)>``."""

    builtin = True
    # Each location is read by one client: (its distribution, how it resolves the directory).
    CLIENTS = (
        ("openai-harmony", "TIKTOKEN_RS_CACHE_DIR", ("TIKTOKEN_RS_CACHE_DIR",), "tiktoken-rs-cache"),
        ("tiktoken", "TIKTOKEN_CACHE_DIR", ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"), "data-gym-cache"),
    )
    libraries = tuple(client for client, *_ in CLIENTS)
    # tiktoken's own table is Python (tiktoken_ext.openai_public); openai-harmony's is compiled in.
    tables = ("tiktoken",)
    # openai-harmony then reads <dir>/o200k_base.tiktoken (the alias links) and never downloads;
    # tiktoken has no switch: a vocab that is not baked is downloaded into its cache.
    offline = (("TIKTOKEN_ENCODINGS_BASE", "@tiktoken"),)
    partial = re.compile(r"\A[0-9a-f]{40}\.[0-9a-f-]{36}\.tmp\Z")
    partial_why = (
        "a partial download: tiktoken writes <sha1(url)>.<uuid>.tmp and renames it to <sha1(url)> when whole"
    )
    default_dirs = tuple(default for *_, default in CLIENTS)

    def __init__(self) -> None:
        super().__init__("tiktoken", [parse_location(f"${var}", "") for _, var, _, _ in self.CLIENTS])

    def cached_name(self, name: str) -> bool:
        return bool(re.fullmatch(r"[0-9a-f]{40}", name) or self.partial.match(name))

    def check_path(self, asset: AssetLike, where: str) -> None:
        canonical = asset.canonical_url()
        if canonical is None:
            raise ManifestError(
                f"{where}: a tiktoken/ asset needs an https:// url; its cache name is "
                "the SHA-1 of that canonical url"
            )
        expected = self.prefix + sha1_name(canonical)
        if asset.path != expected:
            raise ManifestError(
                f"{where}: path {asset.path!r} is not the SHA-1 of its canonical url "
                f"{canonical!r}; expected path {expected!r}"
            )

    def path_for_url(self, url: str) -> str | None:
        vocab = url.startswith("https://") and url.rsplit("/", 1)[-1].endswith(".tiktoken")
        return self.prefix + sha1_name(url) if vocab or url in (tiktoken_hashes() or {}) else None

    def known_urls(self) -> tuple[str, ...]:
        return tuple(tiktoken_hashes() or {})

    def aliases(self, assets: Iterable[AssetLike]) -> dict[str, str]:
        """``tiktoken/<encoding>.tiktoken`` links, for ``TIKTOKEN_ENCODINGS_BASE`` readers."""
        links = {}
        for asset in assets:
            canonical = asset.canonical_url()
            alias = canonical.rsplit("/", 1)[-1] if canonical else ""
            if alias.endswith(".tiktoken"):
                links[self.prefix + alias] = PurePosixPath(asset.path).name
        return links

    def library_sha256(self, asset: AssetLike) -> str | None:
        return (tiktoken_hashes() or {}).get(asset.canonical_url() or "")

    def check_entry(self, asset: AssetLike) -> Finding | None:
        hashes = tiktoken_hashes()
        if hashes is None:
            return None
        canonical = asset.canonical_url()
        if canonical not in hashes:
            return Finding(self.name, asset.name, False, f"{canonical} is not in its table")
        ok = hashes[canonical] == asset.sha256
        detail = (
            "matches" if ok else f"sha256 {asset.sha256} in the manifest, {hashes[canonical]} in tiktoken"
        )
        return Finding(
            self.name, asset.name, ok, detail, mismatch=not ok, expected=hashes[canonical], seen=asset.sha256
        )

    def _rejected(self, f: BakedFile) -> Finding | None:
        """tiktoken's own verdict on a baked vocab its table knows by URL: a MISMATCH, or None."""
        hashes = tiktoken_hashes() or {}
        url = next((u for u in hashes if self.prefix + sha1_name(u) == f.path), None)
        if url is None or hashes[url] == f.sha256:
            return None
        return _table_mismatch("tiktoken", f, hashes[url], url)

    def doctor(self, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]) -> list[Finding]:
        """Each client's lookup, whether or not it is installed (its directory as it resolves it), after
        tiktoken's own table where it knows the vocab."""
        findings = []
        for client, _, variables, default in self.CLIENTS:
            # The client's own resolution: the first variable set wins; set but empty turns caching off.
            var = next((v for v in variables if v in environ), None)
            cache = environ[var] if var else str(Path(tempfile.gettempdir()) / default)
            for f in files:
                if client == "tiktoken" and (rejected := self._rejected(f)):
                    findings.append(rejected)
                elif not cache:
                    findings.append(
                        Finding(client, f.path, False, f"{var} is empty: caching off, it downloads")
                    )
                else:
                    lookup = Path(cache) / self.name_in_location(f.path)
                    findings.append(_check_lookup(client, f.path, lookup, root / f.path, f.sha256))
        return findings


# huggingface_hub's precedence (its constants.py): HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE,
# then HF_HOME/hub, then ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/hub. In bake.serve each
# fallback is a ``loc`` of its own, named by HUB_CHAIN_IDS; only the last serves files.
HUB_CACHE = Location(
    "HF_HUB_CACHE",
    fallback=Location(
        "HUGGINGFACE_HUB_CACHE",
        fallback=Location(
            "HF_HOME", "hub", fallback=Location("XDG_CACHE_HOME", "huggingface", "$HOME/.cache")
        ),
    ),
)
HUB_CHAIN_IDS = {"HUGGINGFACE_HUB_CACHE": "hub.legacy", "HF_HOME": "hub.home", "XDG_CACHE_HOME": "hub.xdg"}


class Hub(Consumer):
    """The Hugging Face Hub: repositories pinned by ``[[hub]]``, baked in huggingface_hub's own cache layout.

    It owns ``hub/``, where each blob is an asset fetched like any other. Its one location
    follows huggingface_hub's precedence (``HUB_CACHE``). Built from the entries a selection
    holds whole, it gives seal the snapshot links (its aliases), the refs and tree listings,
    and the entrypoint its records, all from ``bake.hub.layout``; with no entries (a manifest
    without ``[[hub]]``) it gives none.
    """

    builtin = True
    libraries = ("huggingface_hub",)
    chain_ids = HUB_CHAIN_IDS
    offline = (("HF_HUB_OFFLINE", "1"),)

    def __init__(self, entries: Sequence[HubEntry] = ()) -> None:
        super().__init__(HUB_PREFIX, [HUB_CACHE])
        self.entries = tuple(entries)

    def check_path(self, asset: AssetLike, where: str) -> None:
        raise ManifestError(
            f"{where}: path {asset.path!r} is under {self.prefix}, kept for [[hub]] entries; "
            "pin a repository with `bake add hf://ORG/REPO`"
        )

    def aliases(self, assets: Iterable[AssetLike]) -> dict[str, str]:
        """The snapshot links: ``snapshots/<commit>/<path>`` to ``../../blobs/<etag>``, relative."""
        if not self.entries:
            return {}
        return {self.prefix + name: to for e in self.entries for name, to in layout.snapshot_links(e).items()}

    def seal_files(self) -> dict[str, str]:
        """``refs/<ref>`` and ``trees/<commit>.json``, as huggingface_hub writes them."""
        if not self.entries:
            return {}
        return {self.prefix + name: text for e in self.entries for name, text in layout.data_files(e).items()}

    def serve_records(self, files: Sequence[BakedFile], aliases: Mapping[str, str]) -> list[servefile.Record]:
        """Its chain of ``loc`` records, then the layout's set, directories, placements, files and links."""
        if not self.entries:
            return []
        return [*self.loc_records(), *layout.entry_records(self.entries)]

    def doctor(self, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]) -> list[Finding]:
        """Will huggingface_hub find each baked snapshot file and ref where it looks, offline?

        The image holds no manifest, so this reads the sealed tree under ``<root>/hub``.
        A file that is not the baked one itself is hashed.
        """
        baked_root = Path(root) / HUB_PREFIX
        cache = self.locations[0].resolve(environ)
        if cache is None or not baked_root.is_dir():
            return []
        findings = []
        for repo in sorted(p for p in baked_root.iterdir() if p.is_dir() and "--" in p.name):
            for link in sorted((repo / "snapshots").rglob("*")):
                if link.is_symlink() or link.is_file():
                    rel = link.relative_to(baked_root)
                    findings.append(_hub_file_finding(link, cache / rel, self.prefix + str(rel)))
            for ref in sorted(p for p in (repo / "refs").rglob("*") if p.is_file()):
                rel = ref.relative_to(baked_root)
                findings.append(_hub_ref_finding(ref, cache / rel, self.prefix + str(rel)))
        return findings


def _hub_file_finding(baked: Path, lookup: Path, name: str) -> Finding:
    missing = _no_file(HUB_CLIENT, name, lookup)
    if missing:
        return missing
    same = os.path.realpath(lookup) == os.path.realpath(baked)
    if not same and (
        lookup.stat().st_size != baked.stat().st_size or sha256_file(lookup) != sha256_file(baked)
    ):
        return Finding(HUB_CLIENT, name, False, f"{lookup} is not the baked file; it would use other bytes")
    return Finding(HUB_CLIENT, name, True, f"{lookup} is served")


def _hub_ref_finding(baked: Path, lookup: Path, name: str) -> Finding:
    commit = baked.read_text(encoding="utf-8")
    seen = lookup.read_text(encoding="utf-8") if lookup.is_file() else None
    if seen == commit:
        return Finding(HUB_CLIENT, name, True, f"{lookup} names {commit}")
    return Finding(
        HUB_CLIENT,
        name,
        False,
        f"{lookup} names {seen or 'nothing'}, the image {commit}; pass revision={commit!r} "
        "(the node's entry is never changed)",
    )


# The client the Hub's doctor speaks for, in its findings.
HUB_CLIENT = "huggingface_hub"
# vLLM's envs.py: $VLLM_ASSETS_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/vllm/assets; its
# base.py reads vllm_public_assets/<file> below that. In bake.serve the fallback is a loc of its own.
VLLM_ASSETS_CACHE = Location(
    "VLLM_ASSETS_CACHE",
    vllm_assets.DIRECTORY,
    fallback=Location("XDG_CACHE_HOME", "vllm/assets", "$HOME/.cache"),
)


class VllmAssets(Consumer):
    """vLLM's public test assets: ``get_vllm_public_assets`` reads ``vllm_public_assets/<file>`` under
    ``VLLM_ASSETS_CACHE``, the bucket prefix (one per asset class) dropped from the name.

    The rule is data here; where vLLM is installed, ``bake.consumers.vllm_assets`` reads what that vLLM does
    (its classes' prefixes for ``manifest check`` and ``harvest``, its envs.py for ``doctor``).
    vLLM checks no hash: any file at the name is used, so a wrong one is read, never re-fetched.
    """

    builtin = True
    # vLLM's asset classes are its table: which name under which prefix (it keeps no sha256).
    libraries = tables = ("vllm",)
    chain_ids = {"XDG_CACHE_HOME": f"{vllm_assets.DIRECTORY}.xdg"}
    names_keep_suffix = True

    def __init__(self) -> None:
        super().__init__(vllm_assets.DIRECTORY, [VLLM_ASSETS_CACHE])

    def check_path(self, asset: AssetLike, where: str) -> None:
        name = self.name_in_location(asset.path)
        leaf = name.rsplit("/", 1)[-1]
        if "/" in name:
            raise ManifestError(
                f"{where}: path {asset.path!r} is not where vLLM looks: get_vllm_public_assets drops the "
                f"bucket prefix and reads {self.prefix}{leaf}; write path = {self.prefix + leaf!r}"
            )
        for url in asset.urls:
            found = vllm_assets.bucket_file(url)
            if found and found[1] != name:
                raise ManifestError(
                    f"{where}: path {asset.path!r} is not where vLLM keeps {url}: it caches that file as "
                    f"{self.prefix}{found[1]}; write path = {self.prefix + found[1]!r}, or list that "
                    f"file's own url"
                )

    def path_for_url(self, url: str) -> str | None:
        found = vllm_assets.bucket_file(url)
        return f"{self.prefix}{found[1]}" if found else None

    def url_for_cached(self, name: str) -> str | None:
        lib = vllm_assets.installed()
        classes = lib.classes_for(name) if lib else []
        return lib.url(classes[0], name) if lib and len(classes) == 1 else None

    def why_unnamed(self, name: str) -> str | None:
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
            f"pin it with `bake add URL --path {self.prefix}{name}`"
        )

    def check_entry(self, asset: AssetLike) -> Finding | None:
        lib = vllm_assets.installed()
        if lib is None:
            return None
        name = self.name_in_location(asset.path)
        classes = lib.classes_for(name)
        if len(classes) != 1:
            both = " and ".join(c.name for c in classes)
            seen = f"{both} all ask for {name}" if classes else "no class does"
            return Finding(
                "vllm", asset.name, False,
                f"vLLM {lib.version} would never read {name} as one asset: its classes ask for "
                f"{lib.describe()}; {seen}", mismatch=True,
            )  # fmt: skip
        url = lib.url(classes[0], name)
        if url not in asset.urls:
            return Finding(
                "vllm", asset.name, False,
                f"vLLM {lib.version} ({classes[0].name}) downloads {name} from {url}, which the manifest "
                "does not list", mismatch=True,
            )  # fmt: skip
        return Finding("vllm", asset.name, True, f"matches {classes[0].name} ({url})")

    def doctor(self, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]) -> list[Finding]:
        """Does vLLM find each baked file where it looks? Where vLLM is installed its own envs.py says
        where; elsewhere the rule does, and the findings say so."""
        lib = vllm_assets.installed()
        how = "" if lib else " (vLLM is not installed here: checked by its rule)"
        where = self.locations[0].resolve(environ)
        if lib is not None:
            try:
                where = lib.cache_dir(environ) / lib.directory
            except vllm_assets.VllmCodeError as exc:
                how = f" (vLLM's own envs.py could not say where it looks, {exc}: checked by its rule)"
        findings = []
        for f in files:
            ok, detail = _vllm_lookup(Path(where) / self.name_in_location(f.path), root / f.path, f.sha256)
            findings.append(Finding("vllm", f.path, ok, detail + how))
        return findings


def _vllm_lookup(lookup: Path, baked: Path, sha256: str) -> tuple[bool, str]:
    """vLLM's own test is ``exists()``, with no hash: nothing there (or a dangling link) is a download,
    other bytes there are read as they are."""
    if not lookup.exists():
        seen = "a dangling link" if lookup.is_symlink() else "nothing"
        return False, f"looks at {lookup}, finds {seen}; it would download it"
    if lookup.resolve() == baked.resolve():
        return True, f"{lookup} is served"
    if not lookup.is_file():
        return False, f"{lookup} is not a file, yet vLLM would read it; remove it and rerun the entrypoint"
    actual = sha256_file(lookup)
    if actual != sha256:
        return False, (
            f"{lookup} has sha256 {actual}, expected {sha256}; vLLM checks no hash and would read it: "
            "remove it and rerun the entrypoint, which serves the baked file"
        )
    return True, f"{lookup} is served"


BUILTINS: tuple[Consumer, ...] = (S3Tokenizer(), Tiktoken(), Hub(), VllmAssets())


def parse_consumer(raw: object, index: int) -> Consumer:
    """Validate one ``[[consumer]]`` table and return it. Raises ManifestError naming the consumer."""
    raw = expect_mapping(raw, f"consumer #{index + 1}")
    name = raw.get("name")
    where = f"consumer {name!r}" if isinstance(name, str) and name else f"consumer #{index + 1}"
    refuse_unknown_keys(raw, _CONSUMER_KEYS, where)
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == SERVE_NAME:
        raise ManifestError(
            f"{where}: name {name!r} must be a string of letters, digits, '.', '_' or '-'; "
            "it is also the path prefix the consumer owns"
        )
    if any(b.name == name for b in BUILTINS):
        raise ManifestError(f"{where}: {name!r} is a built-in consumer; give the declared one another name")
    locations = raw.get("locations")
    if not isinstance(locations, list) or not locations:
        raise ManifestError(f"{where}: locations must be a non-empty list of strings, got {locations!r}")
    return Consumer(name, [parse_location(text, where) for text in locations])


def table(declared: Sequence[Consumer] = (), hub_entries: Sequence[HubEntry] = ()) -> tuple[Consumer, ...]:
    """Return the whole table: the built-ins (the Hub with ``hub_entries``), then ``declared``.

    Raises ManifestError for a duplicate name or for two locations that nest
    inside each other (then one consumer's files would land in another's place).
    """
    every = (*(Hub(hub_entries) if isinstance(c, Hub) else c for c in BUILTINS), *declared)
    seen: set[str] = set()
    placed: list[tuple[Consumer, Location]] = []
    for consumer in every:
        if consumer.name in seen:
            raise ManifestError(f"consumer {consumer.name!r}: declared twice; give each consumer one table")
        seen.add(consumer.name)
        for loc in consumer.locations:
            clash = next(((c, other) for c, other in placed if loc.nests_with(other)), None)
            if clash:
                raise ManifestError(
                    f"consumer {consumer.name!r}: location {str(loc)!r} nests with {str(clash[1])!r} of "
                    f"consumer {clash[0].name!r}; give each consumer a place of its own"
                )
            placed.append((consumer, loc))
    return every


def owner(path: str, consumers: Iterable[Consumer]) -> Consumer | None:
    """Return the consumer that owns ``path``, or None: such an asset is baked, verified, linked nowhere."""
    return next((c for c in consumers if c.owns(path)), None)


def check_manifest(assets: Sequence[AssetLike], consumers: Sequence[Consumer] = BUILTINS) -> list[Finding]:
    """Compare manifest entries with the installed consumers' own tables.

    Returns one finding per asset a consumer's table can judge; an empty list
    when no such consumer is installed.
    """
    findings = []
    for asset in assets:
        consumer = owner(asset.path, consumers)
        finding = consumer.check_entry(asset) if consumer else None
        if finding is not None:
            findings.append(finding)
    return findings


def _shown_names(files: Sequence[BakedFile], aliases: Mapping[str, str]) -> list[str]:
    """How the ready line names each file: a nested file by its first two components (which
    repository or corpus), a file with an alias link beside it by the alias (``tiktoken/o200k_base``)."""
    alias_of = {}
    for alias, target in aliases.items():
        parent = PurePosixPath(alias).parent
        alias_of[str(parent / target)] = str(parent / PurePosixPath(alias).stem)
    names = []
    for f in sorted(files, key=lambda f: f.path):
        parts = f.path.split("/")
        names.append("/".join(parts[:2]) if len(parts) > 2 else alias_of.get(f.path, f.path))
    return names


def serve_records(
    consumers: Sequence[Consumer], files: Sequence[BakedFile], aliases: Mapping[str, str] | None = None
) -> list[servefile.Record]:
    """Return every record of ``bake.serve``: each consumer's, in the table's name order.

    Only consumers that own a file get records: a consumer with nothing baked leaves its
    locations alone. ``aliases`` are seal's alias links (paths from the asset root).
    """
    records: list[servefile.Record] = []
    for consumer in sorted(consumers, key=lambda c: c.name):
        owned = sorted((f for f in files if consumer.owns(f.path)), key=lambda f: f.path)
        if owned:
            records += consumer.serve_records(owned, aliases or {})
    return records


def serve_text(
    consumers: Sequence[Consumer], files: Sequence[BakedFile], aliases: Mapping[str, str] | None = None
) -> str:
    """Return ``bake.serve`` (v1, docs/SERVE_FORMAT.md) for ``files`` baked for ``consumers``."""
    return servefile.write(serve_records(consumers, files, aliases))


def declared_from_serve(text: str) -> list[Consumer]:
    """Rebuild the declared consumers (their ``$VAR``/``${VAR:-D}/SUB`` locations) from ``bake.serve``.

    The image holds no manifest; doctor learns the declared consumers here. A chained
    location (a fallback ``@ID``) belongs to a consumer with a layout of its own, which the
    table knows already.
    """
    builtin = {c.name for c in BUILTINS}
    found: dict[str, list[Location]] = {}
    try:
        records = servefile.read(text).records
    except ValueError:
        return []
    for loc in records:
        if not isinstance(loc, servefile.Loc) or loc.consumer in builtin or loc.consumer == "-":
            continue
        if not loc.fallback.startswith("@"):
            found.setdefault(loc.consumer, []).append(
                Location.from_record(loc.mode, loc.var, loc.sub, loc.fallback, {})
            )
    return [Consumer(name, locs) for name, locs in found.items()]


def not_asked(
    consumers: Sequence[Consumer], paths: Iterable[str], *, tables: bool = False
) -> list[tuple[str, str]]:
    """(library, why) for each library of a consumer that owns one of ``paths``, which cannot be asked
    here (doctor); with ``tables``, only the libraries whose own table would judge them (manifest check)."""
    paths = list(paths)
    return [
        (lib, why)
        for c in consumers
        if any(c.owns(p) for p in paths)
        for lib, why in c.not_asked()
        if not tables or lib in c.tables
    ]


def doctor(
    root: Path,
    baked: Sequence[BakedFile],
    consumers: Sequence[Consumer] = BUILTINS,
    environ: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Check, offline, that each consumer accepts the baked file where it will look.

    Returns the findings of every consumer that owns a baked file and whose
    library is installed (declared consumers are always checked).
    """
    env = os.environ if environ is None else environ
    findings = []
    for consumer in consumers:
        owned = [f for f in baked if consumer.owns(f.path)]
        if owned:
            findings += consumer.doctor(root, owned, env)
    return findings

"""The consumers' verdicts: ``bake doctor``'s check of a job's lookups, and ``manifest check``'s of a manifest
entry against the library's own table, as one ``Finding`` each, so both print alike.

Each built-in has its checks here, found by its entry in the table (``CHECKS``); a
declared consumer, or any other, is checked by its locations alone.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bake.consumers import libraries, vllm_assets
from bake.consumers.entries import BUILTINS, Consumer, Hub, S3Tokenizer, Tiktoken, VllmAssets, owner
from bake.consumers.naming import AssetLike, sha1_name
from bake.consumers.serve import BakedFile
from bake.hashes import sha256_file


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
# The client the Hub's doctor speaks for, in its findings.
HUB_CLIENT = "huggingface_hub"


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


# -- manifest check: one entry against the library's own table ----------------------------------------


def _s3tokenizer_entry(consumer: Consumer, asset: AssetLike) -> Finding | None:
    models = libraries.s3tokenizer_models()
    if models is None:
        return None
    model = PurePosixPath(asset.path).stem
    if model not in models:
        return Finding(
            consumer.name, asset.name, False, f"model {model!r} is not in its table", mismatch=True
        )
    url, sha = models[model]
    problems = []
    if sha != asset.sha256:
        problems.append(f"sha256 {asset.sha256} in the manifest, {sha} in s3tokenizer")
    if url not in asset.urls:
        problems.append(f"s3tokenizer downloads {url}, which the manifest does not list")
    detail = "; ".join(problems) or "matches"
    return Finding(
        consumer.name,
        asset.name,
        not problems,
        detail,
        mismatch=bool(problems),
        expected=sha,
        seen=asset.sha256,
    )


def _tiktoken_entry(consumer: Consumer, asset: AssetLike) -> Finding | None:
    hashes = libraries.tiktoken_hashes()
    if hashes is None:
        return None
    canonical = asset.canonical_url()
    if canonical not in hashes:
        return Finding(consumer.name, asset.name, False, f"{canonical} is not in its table")
    ok = hashes[canonical] == asset.sha256
    detail = "matches" if ok else f"sha256 {asset.sha256} in the manifest, {hashes[canonical]} in tiktoken"
    return Finding(
        consumer.name, asset.name, ok, detail, mismatch=not ok, expected=hashes[canonical], seen=asset.sha256
    )


def _vllm_entry(consumer: Consumer, asset: AssetLike) -> Finding | None:
    lib = vllm_assets.installed()
    if lib is None:
        return None
    name = consumer.name_in_location(asset.path)
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


# -- doctor: where each library looks, in this environment --------------------------------------------


def _locations(
    consumer: Consumer, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]
) -> list[Finding]:
    """Check, offline, that each location in this environment holds each baked file."""
    findings = []
    for loc in consumer.locations:
        where = loc.resolve(environ)
        for f in files:
            if where is None:
                findings.append(
                    Finding(consumer.name, f.path, False, f"${loc.var} is unset; run the job through "
                            "bake-entrypoint, which points it at the baked files")
                )  # fmt: skip
                continue
            lookup = where / consumer.name_in_location(f.path)
            findings.append(_check_lookup(consumer.name, f.path, lookup, root / f.path, f.sha256))
    return findings


def _s3tokenizer(
    consumer: Consumer, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]
) -> list[Finding]:
    """Its table's verdict on each file (when s3tokenizer is installed), else where it looks."""
    models = libraries.s3tokenizer_models()
    findings = []
    for f in files:
        model = PurePosixPath(f.path).stem
        known_sha = models.get(model, ("", ""))[1] if models is not None else f.sha256
        if known_sha != f.sha256:
            findings.append(_table_mismatch(consumer.name, f, known_sha or "(no entry)", f"model {model}"))
        else:
            findings += _locations(consumer, root, [f], environ)
    return findings


def _tiktoken_rejects(consumer: Consumer, f: BakedFile) -> Finding | None:
    """tiktoken's own verdict on a baked vocab its table knows by URL: a MISMATCH, or None."""
    hashes = libraries.tiktoken_hashes() or {}
    url = next((u for u in hashes if consumer.prefix + sha1_name(u) == f.path), None)
    if url is None or hashes[url] == f.sha256:
        return None
    return _table_mismatch("tiktoken", f, hashes[url], url)


def _tiktoken(
    consumer: Consumer, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]
) -> list[Finding]:
    """Each client's lookup, whether or not it is installed (its directory as it resolves it), after
    tiktoken's own table where it knows the vocab."""
    findings = []
    for client, _, variables, default in Tiktoken.CLIENTS:
        # The client's own resolution: the first variable set wins; set but empty turns caching off.
        var = next((v for v in variables if v in environ), None)
        cache = environ[var] if var else str(Path(tempfile.gettempdir()) / default)
        for f in files:
            if client == "tiktoken" and (rejected := _tiktoken_rejects(consumer, f)):
                findings.append(rejected)
            elif not cache:
                findings.append(Finding(client, f.path, False, f"{var} is empty: caching off, it downloads"))
            else:
                lookup = Path(cache) / consumer.name_in_location(f.path)
                findings.append(_check_lookup(client, f.path, lookup, root / f.path, f.sha256))
    return findings


def _hub(
    consumer: Consumer, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]
) -> list[Finding]:
    """Will huggingface_hub find each baked snapshot file and ref where it looks, offline?

    The image holds no manifest, so this reads the sealed tree under ``<root>/hub``.
    A file that is not the baked one itself is hashed.
    """
    baked_root = Path(root) / consumer.name
    cache = consumer.locations[0].resolve(environ)
    if cache is None or not baked_root.is_dir():
        return []
    findings = []
    for repo in sorted(p for p in baked_root.iterdir() if p.is_dir() and "--" in p.name):
        for link in sorted((repo / "snapshots").rglob("*")):
            if link.is_symlink() or link.is_file():
                rel = link.relative_to(baked_root)
                findings.append(_hub_file_finding(link, cache / rel, consumer.prefix + str(rel)))
        for ref in sorted(p for p in (repo / "refs").rglob("*") if p.is_file()):
            rel = ref.relative_to(baked_root)
            findings.append(_hub_ref_finding(ref, cache / rel, consumer.prefix + str(rel)))
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


def _vllm(
    consumer: Consumer, root: Path, files: Sequence[BakedFile], environ: Mapping[str, str]
) -> list[Finding]:
    """Does vLLM find each baked file where it looks? Where vLLM is installed its own envs.py says
    where; elsewhere the rule does, and the findings say so."""
    lib = vllm_assets.installed()
    how = "" if lib else " (vLLM is not installed here: checked by its rule)"
    where = consumer.locations[0].resolve(environ)
    if lib is not None:
        try:
            where = lib.cache_dir(environ) / lib.directory
        except vllm_assets.VllmCodeError as exc:
            how = f" (vLLM's own envs.py could not say where it looks, {exc}: checked by its rule)"
    findings = []
    for f in files:
        ok, detail = _vllm_lookup(Path(where) / consumer.name_in_location(f.path), root / f.path, f.sha256)
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


# -- the table's checks, by entry ---------------------------------------------------------------------

EntryCheck = Callable[[Consumer, AssetLike], Finding | None]
LookupCheck = Callable[[Consumer, Path, Sequence[BakedFile], Mapping[str, str]], list[Finding]]
# Each built-in's checks: (manifest check's of an entry, doctor's). Any other consumer, a declared one,
# has no table to judge an entry by; doctor checks each of its locations (``_locations``).
CHECKS: tuple[tuple[type[Consumer], EntryCheck | None, LookupCheck], ...] = (
    (S3Tokenizer, _s3tokenizer_entry, _s3tokenizer),
    (Tiktoken, _tiktoken_entry, _tiktoken),
    (Hub, None, _hub),
    (VllmAssets, _vllm_entry, _vllm),
)


def _checks(consumer: Consumer) -> tuple[EntryCheck | None, LookupCheck]:
    return next(
        ((entry, lookup) for kind, entry, lookup in CHECKS if isinstance(consumer, kind)), (None, _locations)
    )


def check_manifest(assets: Sequence[AssetLike], consumers: Sequence[Consumer] = BUILTINS) -> list[Finding]:
    """Compare manifest entries with the installed consumers' own tables.

    Returns one finding per asset a consumer's table can judge; an empty list
    when no such consumer is installed.
    """
    findings = []
    for asset in assets:
        consumer = owner(asset.path, consumers)
        entry = _checks(consumer)[0] if consumer else None
        finding = entry(consumer, asset) if entry else None
        if finding is not None:
            findings.append(finding)
    return findings


def not_asked(
    consumers: Sequence[Consumer], paths: Iterable[str], *, tables: bool = False
) -> list[tuple[str, str]]:
    """(library, why) for each library of a consumer that owns one of ``paths``, which cannot be asked
    here (doctor): those not installed; with ``tables``, only the libraries whose own table would judge
    them (manifest check)."""
    paths = list(paths)
    return [
        (lib, NOT_INSTALLED)
        for c in consumers
        if any(c.owns(p) for p in paths)
        for lib in c.libraries
        if not libraries.installed(lib) and (not tables or lib in c.tables)
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
            findings += _checks(consumer)[1](consumer, root, owned, env)
    return findings

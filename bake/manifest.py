"""Load, validate and select assets from a TOML manifest."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake import consumers, offline, servefile
from bake.asset import Asset
from bake.byte_sizes import MIB
from bake.control_chars import escape, has_control
from bake.errors import ManifestError
from bake.hashes import SHA256_HEX, bare_sha256
from bake.hub import schema as hub_schema
from bake.hub.entry import HubEntry
from bake.paths import check_path, parents
from bake.tomlkeys import expect_mapping, refuse_unknown_keys, with_suggestion
from bake.urls import check_url

DEFAULT_MANIFEST = "docker/assets.toml"

_ALLOWED_KEYS = {"name", "path", "sha256", "urls", "size", "groups", "layer"}
# The ``[units]`` table: how the selection is cut into units (bake.layers), never what is baked.
_UNITS_KEYS = {"hub_file_threshold"}
# A Hub file this large or larger is a unit, a layer, of its own (bake.layers; docs/building.md has
# the measurement it came from: what one more layer costs an agent, against the bytes a bump re-ships).
HUB_FILE_THRESHOLD = 16 * MIB
_REQUIRED_KEYS = ("name", "path", "sha256", "urls")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A layer name goes into its unit's image tag (bake.layers), which holds at most 128 characters.
MAX_LAYER_NAME = 48
# Root names bake writes itself, beside the assets.
RESERVED_ROOT_NAMES = ("SHA256SUMS", "bake.lock.json", consumers.SERVE_NAME, offline.NAME)

# The contract's bound on a manifest, checked before a byte is parsed.
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
# Arrays, inline tables and dotted keys nest this deep at most. The schema needs a
# few levels; the bound keeps the parser's recursion, and its cost per dotted-key
# level, small.
MAX_DEPTH = 32
# Outside strings and comments: brackets that open or close a level, dots that add
# one, and line ends. Strings and comments are matched whole, so their text is skipped.
_DEPTH_TOKENS = re.compile(
    # Each string form is an unrolled loop (runs of plain characters between
    # escapes), which the regex engine scans without per-character backtracking.
    r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""|'
    r"'''[^']*(?:'(?!'')[^']*)*'''|"
    r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'
    r"'[^'\n]*'|#[^\n]*|[\[\]{}.\n]",
    re.DOTALL,
)


@dataclass(frozen=True)
class Signing:
    """The manifest's ``[signing]`` table: the key its published images must be signed with.

    ``verify_key`` is a public key file (relative paths are the manifest directory's) or a KMS
    URI, as cosign's ``--key`` takes it; ``tlog`` False verifies without the transparency log.
    Not part of the manifest digest: a new key names the same assets.
    """

    verify_key: str
    tlog: bool = True


@dataclass(frozen=True)
class Manifest:
    """A manifest's assets in file order, the consumers it declares, and the Hub entries it holds whole.

    It reads as the sequence of its assets, so a caller that only iterates them is unchanged.
    ``select`` returns a new one; ``of`` makes one from any assets (a plain list declares nothing).
    ``signing`` is its ``[signing]`` table, if any.
    """

    assets: tuple[Asset, ...]
    declared: tuple[consumers.Consumer, ...] = ()
    hub_entries: tuple[HubEntry, ...] = ()
    # ``[units] hub_file_threshold``: a Hub file this large or larger is a unit of its own.
    hub_file_threshold: int = HUB_FILE_THRESHOLD
    signing: Signing | None = None

    @classmethod
    def of(
        cls,
        assets: Iterable[Asset],
        declared: Iterable[consumers.Consumer] = (),
        hub_file_threshold: int = HUB_FILE_THRESHOLD,
        signing: Signing | None = None,
    ) -> Manifest:
        """Return the manifest of ``assets``, with the Hub entries every blob of which is among them."""
        assets = tuple(assets)
        entries = tuple(hub_schema.selected_entries(assets))
        return cls(assets, tuple(declared), entries, hub_file_threshold, signing)

    def __iter__(self) -> Iterator[Asset]:
        return iter(self.assets)

    def __len__(self) -> int:
        return len(self.assets)

    def __getitem__(self, index: int) -> Asset:
        return self.assets[index]

    def consumers(self) -> tuple[consumers.Consumer, ...]:
        """Return the whole consumer table: built-ins (the Hub with the entries held whole), then declared."""
        return consumers.table(self.declared, self.hub_entries)


def as_manifest(assets: Iterable[Asset]) -> Manifest:
    """Return ``assets`` when it is a Manifest, else the manifest of a plain list (no declared consumers)."""
    return assets if isinstance(assets, Manifest) else Manifest.of(assets)


def near_misses(assets: Manifest) -> list[str]:
    """Return a warning for each asset under a directory one typo away from a consumer's prefix.

    Such an asset is baked and verified but served nowhere (``tiktokn/...``), which no check refuses.
    """
    table = assets.consumers()
    prefixes = [c.prefix for c in table]
    warnings = []
    for asset in assets:
        top = asset.path.partition("/")[0] + "/"
        if "/" not in asset.path or consumers.owner(asset.path, table) is not None:
            continue
        close = difflib.get_close_matches(top, prefixes, n=1, cutoff=0.8)
        if close:
            warnings.append(
                f"asset {asset.name!r}: path {asset.path!r} lies under no consumer's prefix, so it is "
                f"baked but served nowhere; did you mean {close[0]!r}?"
            )
    return warnings


def _check_groups(groups: object, where: str) -> list[str]:
    if not isinstance(groups, list) or not all(
        isinstance(g, str) and g and not has_control(g) for g in groups
    ):
        raise ManifestError(
            f"{where}: groups must be a list of names without control characters, got {groups!r}"
        )
    return groups


def _check_layer(layer: object, where: str) -> str | None:
    if layer is not None and not (
        isinstance(layer, str) and _NAME.fullmatch(layer) and len(layer) <= MAX_LAYER_NAME
    ):
        raise ManifestError(
            f"{where}: layer {layer!r} must be a name of at most {MAX_LAYER_NAME} letters, digits, '.', '_' "
            "or '-' (it is part of an image tag); give the assets that share one layer the same name"
        )
    return layer


def parse_asset(
    raw: object,
    index: int,
    *,
    allow_http: bool = False,
    table: Sequence[consumers.Consumer] = consumers.BUILTINS,
) -> Asset:
    """Validate one ``[[asset]]`` table and return it as an Asset.

    The owning consumer in ``table`` (if any) checks its naming rule. Raises
    ManifestError naming the asset and the broken rule.
    """
    raw = expect_mapping(raw, f"asset #{index + 1}")
    name = raw.get("name")
    where = f"asset {name!r}" if isinstance(name, str) and name else f"asset #{index + 1}"
    refuse_unknown_keys(raw, _ALLOWED_KEYS, where)
    missing = [k for k in _REQUIRED_KEYS if k not in raw]
    if missing:
        raise ManifestError(f"{where}: missing required key(s) {', '.join(missing)}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ManifestError(
            f"{where}: name {name!r} must be a non-empty string of letters, digits, '.', '_' or '-'"
        )
    sha = bare_sha256(raw["sha256"])
    if not isinstance(sha, str) or not SHA256_HEX.fullmatch(sha):
        raise ManifestError(
            f"{where}: sha256 must be 64 hex characters (or sha256: and them), got {raw['sha256']!r}"
            + (f" ({len(sha)} characters)" if isinstance(sha, str) else "")
        )
    urls = raw["urls"]
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
        raise ManifestError(f"{where}: urls must be a non-empty list of strings, got {urls!r}")
    for url in urls:
        check_url(url, allow_http=allow_http, where=where)
    size = raw.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ManifestError(f"{where}: size must be a non-negative integer, got {size!r}")
    groups = _check_groups(raw.get("groups", []), where)
    asset = Asset(
        name=name,
        path=check_path(raw["path"], where, RESERVED_ROOT_NAMES),
        sha256=sha,
        urls=tuple(urls),
        size=size,
        groups=tuple(groups),
        layer=_check_layer(raw.get("layer"), where),
    )
    owner = consumers.owner(asset.path, table)
    if owner is not None:
        owner.check_path(asset, where)
    return asset


def _check_bounds(text: str, source: str) -> None:
    """Refuse a manifest too large or nested too deep, before the TOML parser sees it.

    A dot outside strings counts as a level for the rest of its line (dotted keys;
    a float's dot only makes the bound stricter), and brackets count until closed.
    A lexer this coarse is enough: it only has to bound the work, tomllib still
    judges the syntax.
    """
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{source}: {len(text)} characters, more than the {MAX_MANIFEST_BYTES // 2**20} MiB "
            "a manifest may hold; split it, or pin fewer files"
        )
    brackets = dots = 0
    for token in _DEPTH_TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            brackets += 1
        elif char in "]}":
            brackets = max(brackets - 1, 0)
        elif char == ".":
            dots += 1
        elif char == "\n":
            dots = 0
        if brackets + dots > MAX_DEPTH:
            line = text.count("\n", 0, token.start()) + 1
            raise ManifestError(
                f"{source}: line {line}: tables, arrays or dotted keys nested more than {MAX_DEPTH} "
                "levels deep; a manifest needs only a few, so this file is not a manifest"
            )


def _load_toml(text: str, source: str) -> dict:
    _check_bounds(text, source)
    try:
        import tomllib  # novermin - Python 3.10 falls back to the vendored tomli
    except ModuleNotFoundError:
        from bake._vendor import tomli as tomllib
    try:
        return tomllib.loads(text)
    except RecursionError:  # a nesting the coarse bound above misjudged; never a traceback
        raise ManifestError(
            f"{source}: nested too deep to parse; a manifest needs only a few levels"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML: {escape(str(exc))}; fix the line named") from None


def _array_of_tables(data: dict, key: str, source: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ManifestError(f"{source}: {key!r} must be an array of tables written [[{key}]], not [{key}]")
    return value


def parse_manifest(
    text: str, *, source: str = "<manifest>", allow_http: bool = False, allow_empty: bool = False
) -> Manifest:
    """Parse manifest text and return its assets in file order, with the consumers it declares.

    ``allow_empty``: a manifest with no entries yet (``bake add`` starts one) is no error.
    Raises ManifestError for any broken rule, naming the asset or consumer.
    """
    data = _load_toml(text, source)
    tables = ("asset", "consumer", "hub", "units", "signing")
    extra = sorted(set(data) - set(tables))
    if extra:
        raise ManifestError(
            f"{source}: unknown top-level key(s) "
            f"{', '.join(with_suggestion(k, tables) for k in extra)}; "
            "only [[asset]], [[consumer]] and [[hub]] tables, one [units] table and one [signing] table "
            "are allowed"
        )
    threshold = _units_table(data.get("units"), source)
    signing = _parse_signing(data.get("signing"), source)
    declared = [
        consumers.parse_consumer(raw, i) for i, raw in enumerate(_array_of_tables(data, "consumer", source))
    ]
    for consumer in declared:
        _check_serve_limits(consumer)
    table = consumers.table(declared)
    raw_assets = _array_of_tables(data, "asset", source)
    hub_entries = hub_schema.parse_entries(data.get("hub"), source)
    if not raw_assets and not hub_entries and not allow_empty:
        raise ManifestError(f"{source}: no [[asset]] tables found; a manifest lists at least one asset")
    assets = [parse_asset(raw, i, allow_http=allow_http, table=table) for i, raw in enumerate(raw_assets)]
    assets += [Asset(**fields) for fields in hub_schema.blob_fields(hub_entries)]
    for field in ("name", "path"):
        seen: dict[str, str] = {}
        for asset in assets:
            key = getattr(asset, field)
            if key in seen:
                raise ManifestError(
                    f"asset {asset.name!r}: duplicate {field} {key!r} (also used by asset {seen[key]!r})"
                )
            seen[key] = asset.name
    _check_path_prefixes(assets)
    return Manifest.of(assets, declared, threshold, signing)


def _units_table(raw: object, source: str) -> int:
    """The ``[units]`` table's ``hub_file_threshold`` in bytes (HUB_FILE_THRESHOLD when absent)."""
    if raw is None:
        return HUB_FILE_THRESHOLD
    where = f"{source}: [units]"
    refuse_unknown_keys(expect_mapping(raw, where), _UNITS_KEYS, where)
    threshold = raw.get("hub_file_threshold", HUB_FILE_THRESHOLD)
    if type(threshold) is not int or threshold < 1:
        raise ManifestError(
            f"{where}: hub_file_threshold must be a size in bytes, a positive integer, got {threshold!r}; "
            "a Hub file this large or larger becomes a unit (a layer) of its own"
        )
    return threshold


def _parse_signing(raw: object, source: str) -> Signing | None:
    """The ``[signing]`` table: ``verify-key`` (required) and ``tlog`` (a boolean, default true)."""
    if raw is None:
        return None
    table = expect_mapping(raw, f"{source}: [signing]")
    refuse_unknown_keys(table, ("verify-key", "tlog"), f"{source}: [signing]")
    key, tlog = table.get("verify-key"), table.get("tlog", True)
    if not isinstance(key, str) or not key.strip() or has_control(key):
        raise ManifestError(
            f"{source}: [signing] verify-key must be a public key file or a KMS URI, got {key!r}; "
            'write it as verify-key = "keys/bake-assets.pub"'
        )
    if not isinstance(tlog, bool):
        raise ManifestError(f"{source}: [signing] tlog must be true or false, got {tlog!r}")
    return Signing(key, tlog)


def _check_serve_limits(consumer: consumers.Consumer) -> None:
    """Refuse locations bake.serve cannot hold here, where seal would fail on them with a ValueError."""
    try:
        servefile.write(consumer.loc_records())
    except ValueError as exc:
        expected = str(exc).rpartition("expected ")[2]  # the record itself can be kilobytes long
        raise ManifestError(
            f"consumer {consumer.name!r}: a location bake.serve cannot hold, whose records need "
            f"{expected} (docs/SERVE_FORMAT.md); shorten its default or SUB"
        ) from None


def _check_path_prefixes(assets: list[Asset]) -> None:
    """A path may not be a directory of another asset (a/b vs a/b/c)."""
    paths = {a.path: a.name for a in assets}
    for asset in assets:
        for parent in parents(asset.path):
            if parent in paths:
                raise ManifestError(
                    f"asset {asset.name!r}: path {asset.path!r} lies under {parent!r}, "
                    f"which is the file of asset {paths[parent]!r}"
                )


def read_manifest_text(path: str | Path) -> str:
    """Return a manifest file's text, read no further than the size bound. Raises ManifestError."""
    try:
        # Non-blocking, so that a FIFO (or a device) is refused below instead of blocking open().
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ManifestError(
                    f"manifest {str(path)!r}: expected a regular file (or a link to one), found "
                    f"{'a directory' if stat.S_ISDIR(mode) else 'a FIFO, socket or device'}; "
                    "give the path of the TOML file"
                )
            # One byte past the bound shows an oversized file without reading all of it.
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"manifest {str(path)!r}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"manifest {str(path)!r}: larger than the {MAX_MANIFEST_BYTES // 2**20} MiB a manifest "
            "may hold; split it, or pin fewer files"
        )
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")  # a BOM, as Windows editors write it
    except UnicodeDecodeError:
        raise ManifestError(f"manifest {str(path)!r}: not UTF-8 text") from None
    return text


def load_manifest(path: str | Path, *, allow_http: bool = False) -> Manifest:
    """Read and validate a manifest file. Raises ManifestError.

    A relative ``[signing] verify-key`` file is taken from the manifest's directory.
    """
    manifest = parse_manifest(read_manifest_text(path), source=str(path), allow_http=allow_http)
    signing = manifest.signing
    if (
        signing is not None
        and "://" not in signing.verify_key
        and not signing.verify_key.startswith("pkcs11:")
    ):
        key = Path(path).parent / signing.verify_key
        manifest = dataclasses.replace(manifest, signing=dataclasses.replace(signing, verify_key=str(key)))
    return manifest


def select(assets: Sequence[Asset], groups: Sequence[str] = ()) -> Manifest:
    """Return the assets a consumer asked for, with the manifest's declared consumers.

    With no groups, every asset. Otherwise the assets in any named group plus
    the shared assets that name no group. Raises ManifestError for a group no
    asset names.
    """
    manifest = as_manifest(assets)
    if not groups:
        return manifest
    known = {g for a in manifest for g in a.groups}
    unknown = [g for g in groups if g not in known]
    if unknown:
        raise ManifestError(
            f"group(s) {', '.join(map(repr, unknown))} are named by no asset; "
            f"known groups: {', '.join(sorted(known)) or 'none'}"
        )
    wanted = set(groups)
    chosen = (a for a in manifest if not a.groups or wanted & set(a.groups))
    return Manifest.of(chosen, manifest.declared, manifest.hub_file_threshold, manifest.signing)


def manifest_digest(assets: Iterable[Asset]) -> str:
    """Return the sha256 of the canonical JSON of the selected assets' path, size and sha256.

    It is computed from the manifest alone (a missing size is ``null``), so a
    build can name the content before fetching anything. Declared consumers
    change what ``seal`` writes, so they are covered too; a manifest without
    ``[[consumer]]`` keeps the digest it always had. Hub entries are covered, with
    the ``[units]`` threshold that cuts their files into units (the index and the
    whole image bear this digest in their tags); a manifest without ``[[hub]]``
    keeps its digest whatever the threshold.
    """
    manifest = as_manifest(assets)
    entries = sorted(
        ({"path": a.path, "sha256": a.sha256, "size": a.size} for a in manifest),
        key=lambda e: e["path"],
    )
    declared = sorted((c.declaration() for c in manifest.declared), key=lambda d: d["name"])
    hub = hub_schema.digest_records(manifest.hub_entries)
    extras = {"consumers": declared} if declared else {}
    # A Hub entry's files are cut into units by the threshold, so the threshold is part of what the
    # index and whole images under this digest hold.
    extras |= {"hub": hub, "units": {"hub_file_threshold": manifest.hub_file_threshold}} if hub else {}
    doc = {"assets": entries, **extras} if extras else entries
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def to_json(asset: Asset) -> dict:
    """Return the resolved form of an asset, as ``bake manifest`` prints it."""
    return {
        "name": asset.name,
        "path": asset.path,
        "sha256": asset.sha256,
        "size": asset.size,
        "urls": list(asset.urls),
        "groups": list(asset.groups),
    }

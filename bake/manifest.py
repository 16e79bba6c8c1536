"""Load, validate and select assets from a TOML manifest."""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path, PurePosixPath
from urllib.parse import SplitResult, urlsplit

from bake import consumers, hubtable, offline, servefile
from bake.errors import ManifestError
from bake.hashes import SHA256_HEX
from bake.tables import expect_table, refuse_unknown_keys
from bake.text import escape, has_control

DEFAULT_MANIFEST = "docker/assets.toml"

_ALLOWED_KEYS = {"name", "path", "sha256", "urls", "size", "groups", "layer"}
_REQUIRED_KEYS = ("name", "path", "sha256", "urls")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A layer name goes into its unit's image tag (bake.layers), which holds at most 128 characters.
MAX_LAYER_NAME = 48
# Root names bake writes itself, beside the assets.
RESERVED_ROOT_NAMES = ("SHA256SUMS", "bake.lock.json", consumers.SERVE_NAME, offline.NAME)
SCHEMES = ("https", "http", "file", "hf")

# The contract's bound on a manifest, checked before a byte is parsed.
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
# Arrays, inline tables and dotted keys nest this deep at most. The schema needs a
# few levels; the bound keeps the parser's recursion, and its cost per dotted-key
# level, small.
MAX_DEPTH = 32
# A path component leaves room for the staging name bake puts beside it
# (".NAME.bake-staging.HOST.PID.N", HOST up to 64 bytes) within NAME_MAX, 255 bytes.
MAX_COMPONENT_BYTES = 255 - 100
# A whole asset path stays far below PATH_MAX (4096), whatever --dest is put before it.
MAX_PATH_BYTES = 1024
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
class Asset:
    """One file to bake: where it goes, what it must hash to, where to get it."""

    name: str
    path: str
    sha256: str
    urls: tuple[str, ...]
    size: int | None = None
    groups: tuple[str, ...] = ()
    # For a [[hub]] blob: the repository files it backs (bake.hubtable); not part of equality.
    hub: hubtable.HubBlob | None = dataclass_field(default=None, compare=False, repr=False)
    # The ``layer = "NAME"`` key: assets sharing it form one unit, one image layer (bake.layers).
    layer: str | None = None

    def canonical_url(self) -> str | None:
        """Return the first ``https://`` URL, the one consumers derive cache names from."""
        return next((u for u in self.urls if u.startswith("https://")), None)


class Assets(list):
    """A manifest's assets in file order, carrying the consumers it declares with ``[[consumer]]``.

    A list, so every caller that iterates assets is unchanged; the declared
    consumers travel with it through ``select`` to the digest and to ``seal``.
    """

    def __init__(self, items: Iterable[Asset] = (), declared: Iterable[consumers.Consumer] = ()) -> None:
        super().__init__(items)
        self.declared: tuple[consumers.Consumer, ...] = tuple(declared)

    def consumers(self) -> tuple[consumers.Consumer, ...]:
        """Return the whole consumer table: built-ins (the Hub with the entries held whole), then declared."""
        return consumers.table(self.declared, hubtable.selected_entries(self))


def declared_consumers(assets: Iterable[Asset]) -> tuple[consumers.Consumer, ...]:
    """Return the consumers a manifest declared (none for a plain list of assets)."""
    return getattr(assets, "declared", ())


def is_loopback_host(host: str | None) -> bool:
    """Return True for ``localhost`` and loopback IP literals."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Query parameters that carry a secret: tokens, keys, passwords, and the signatures of presigned
# URLs (S3's X-Amz-*, Google's X-Goog-*, Azure's SAS ``sig``). A name that contains one of the
# words counts, whatever its case.
_CREDENTIAL_PARAM = re.compile(
    r"token|secret|passw|signature|credential|api_?key|^(sig|key|auth|pwd|code)$", re.IGNORECASE
)


def is_credential_param(name: str) -> bool:
    """Return whether a query parameter named ``name`` looks like it carries a credential."""
    return bool(_CREDENTIAL_PARAM.search(name))


def _redact_query(query: str) -> str:
    return "&".join(
        f"{name}=***" if sep and is_credential_param(name) else f"{name}{sep}{value}"
        for name, sep, value in (part.partition("=") for part in query.split("&"))
    )


def redact_url(url: str) -> str:
    """Return ``url`` with any password, and any query value that looks like a credential, as ``***``.

    For messages and reports. Plain string surgery, not urlsplit: it must also work on a URL too
    broken to parse.
    """
    scheme, sep, rest = url.partition("://")
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    userinfo, at, hostport = rest[:end].rpartition("@")
    if sep and at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:***@{hostport}{rest[end:]}"
    before, question, query = rest.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        rest = f"{before}?{_redact_query(query)}{hash_}{fragment}"
    return f"{scheme}{sep}{rest}"


def check_url(url: str, *, allow_http: bool, where: str) -> None:
    """Raise ManifestError unless ``url`` parses and has an allowed scheme.

    ``where`` names the asset (or option) in the message; a password in the
    URL never reaches it.
    """
    shown = redact_url(url)
    if has_control(url):
        raise ManifestError(
            f"{where}: url {shown!r} holds a control character (a tab, a line break...); "
            "write it percent-encoded, for example %0A for a newline"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - the property raises for a port out of range
    except ValueError as exc:
        raise ManifestError(f"{where}: url {shown!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ManifestError(
            f"{where}: url {shown!r} has scheme {scheme or 'none'!r}; expected one of "
            "https://, http:// (loopback only), file:// or hf://ORG/REPO[@REV]/PATH"
        )
    if scheme == "http" and not allow_http and not is_loopback_host(parts.hostname):
        raise ManifestError(
            f"{where}: url {shown!r} is plain http to a non-loopback host; "
            "use https, or pass --allow-http if this network is trusted"
        )
    if scheme == "hf" and len([p for p in (parts.netloc + parts.path).split("/") if p]) < 3:
        raise ManifestError(f"{where}: url {shown!r} must look like hf://ORG/REPO[@REVISION]/PATH")
    if scheme in ("https", "http") and not parts.hostname:
        raise ManifestError(f"{where}: url {shown!r} has no host")
    if scheme == "file":
        _check_file_url(url, parts, where)


def near_misses(assets: Assets) -> list[str]:
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


def _check_file_url(url: str, parts: SplitResult, where: str) -> None:
    """Refuse a file: URL a build would misread: a relative one, or one that names another host."""
    shown = redact_url(url)
    if parts.netloc not in ("", "localhost"):
        raise ManifestError(
            f"{where}: url {shown!r} names the host {parts.netloc!r}; bake reads file:// URLs on this "
            f"machine only: write file://{parts.path or '/path/to/file'} (file:/// and an absolute path)"
        )
    if not parts.path.startswith("/"):
        raise ManifestError(
            f"{where}: url {shown!r} is a relative file: URL, which would be read against whatever "
            "directory bake runs in; write an absolute one: file:///path/to/file"
        )


def _check_path(path: object, where: str) -> str:
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{where}: 'path' must be a non-empty string, got {path!r}")
    if has_control(path):
        raise ManifestError(
            f"{where}: path {path!r} holds control characters; SHA256SUMS and the logs are "
            "line-based, so a path must be printable: rename the file"
        )
    if "\\" in path:
        raise ManifestError(f"{where}: path {path!r} must be a POSIX path without backslashes")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise ManifestError(f"{where}: path {path!r} is absolute; give a path relative to --dest")
    if ".." in pure.parts or path != pure.as_posix() or path.endswith("/"):
        raise ManifestError(
            f"{where}: path {path!r} must be a normalised relative path with no '..' "
            f"(expected something like {pure.as_posix().lstrip('./') or 'dir/file'!r})"
        )
    if path == ".":
        raise ManifestError(f"{where}: path '.' is --dest itself; give a file path such as 'dir/file'")
    _check_path_length(path, where)
    if pure.name in RESERVED_ROOT_NAMES and len(pure.parts) == 1:
        raise ManifestError(f"{where}: path {path!r} is reserved for bake's own index files")
    return path


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
        isinstance(layer, str) and _NAME.match(layer) and len(layer) <= MAX_LAYER_NAME
    ):
        raise ManifestError(
            f"{where}: layer {layer!r} must be a name of at most {MAX_LAYER_NAME} letters, digits, '.', '_' "
            "or '-' (it is part of an image tag); give the assets that share one layer the same name"
        )
    return layer


def _check_path_length(path: str, where: str) -> None:
    """Refuse a path the filesystem could not hold, with bake's staging name beside it."""
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ManifestError(
            f"{where}: path {path[:64]!r}... is longer than {MAX_PATH_BYTES} bytes; choose a shorter path"
        )
    for part in PurePosixPath(path).parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
            raise ManifestError(
                f"{where}: path component {part[:64]!r}... is longer than {MAX_COMPONENT_BYTES} bytes "
                "(NAME_MAX is 255, and bake's staging name adds to it); choose a shorter name"
            )


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
    raw = expect_table(raw, f"asset #{index + 1}")
    name = raw.get("name")
    where = f"asset {name!r}" if isinstance(name, str) and name else f"asset #{index + 1}"
    refuse_unknown_keys(raw, _ALLOWED_KEYS, where)
    missing = [k for k in _REQUIRED_KEYS if k not in raw]
    if missing:
        raise ManifestError(f"{where}: missing required key(s) {', '.join(missing)}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ManifestError(
            f"{where}: name {name!r} must be a non-empty string of letters, digits, '.', '_' or '-'"
        )
    sha = raw["sha256"]
    if isinstance(sha, str) and sha.lower().startswith("sha256:"):
        raise ManifestError(
            f"{where}: sha256 {sha!r} carries the 'sha256:' prefix that pip and Docker write; "
            "drop the prefix: give the 64 hex characters alone"
        )
    if not isinstance(sha, str) or not SHA256_HEX.match(sha.lower()):
        raise ManifestError(
            f"{where}: sha256 must be 64 hex characters, got {sha!r}"
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
        path=_check_path(raw["path"], where),
        sha256=sha.lower(),
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
) -> Assets:
    """Parse manifest text and return its assets in file order, with the consumers it declares.

    ``allow_empty``: a manifest with no entries yet (``bake add`` starts one) is no error.
    Raises ManifestError for any broken rule, naming the asset or consumer.
    """
    data = _load_toml(text, source)
    extra = sorted(set(data) - {"asset", "consumer", "hub"})
    if extra:
        raise ManifestError(
            f"{source}: unknown top-level key(s) {', '.join(extra)}; "
            "only [[asset]], [[consumer]] and [[hub]] tables are allowed"
        )
    declared = [
        consumers.parse_consumer(raw, i) for i, raw in enumerate(_array_of_tables(data, "consumer", source))
    ]
    for consumer in declared:
        _check_serve_limits(consumer)
    table = consumers.table(declared)
    raw_assets = _array_of_tables(data, "asset", source)
    hub_entries = hubtable.parse_entries(data.get("hub"), source)
    if not raw_assets and not hub_entries and not allow_empty:
        raise ManifestError(f"{source}: no [[asset]] tables found; a manifest lists at least one asset")
    assets = [parse_asset(raw, i, allow_http=allow_http, table=table) for i, raw in enumerate(raw_assets)]
    assets += [Asset(**fields) for fields in hubtable.blob_fields(hub_entries)]
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
    return Assets(assets, declared)


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
        for parent in servefile.parents(asset.path):
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


def load_manifest(path: str | Path, *, allow_http: bool = False) -> Assets:
    """Read and validate a manifest file. Raises ManifestError."""
    return parse_manifest(read_manifest_text(path), source=str(path), allow_http=allow_http)


def select(assets: Sequence[Asset], groups: Sequence[str] = ()) -> Assets:
    """Return the assets a consumer asked for, with the manifest's declared consumers.

    With no groups, every asset. Otherwise the assets in any named group plus
    the shared assets that name no group. Raises ManifestError for a group no
    asset names.
    """
    declared = declared_consumers(assets)
    if not groups:
        return Assets(assets, declared)
    known = {g for a in assets for g in a.groups}
    unknown = [g for g in groups if g not in known]
    if unknown:
        raise ManifestError(
            f"group(s) {', '.join(map(repr, unknown))} are named by no asset; "
            f"known groups: {', '.join(sorted(known)) or 'none'}"
        )
    wanted = set(groups)
    return Assets((a for a in assets if not a.groups or wanted & set(a.groups)), declared)


def manifest_digest(assets: Sequence[Asset]) -> str:
    """Return the sha256 of the canonical JSON of the selected assets' path, size and sha256.

    It is computed from the manifest alone (a missing size is ``null``), so a
    build can name the content before fetching anything. Declared consumers
    change what ``seal`` writes, so they are covered too; a manifest without
    ``[[consumer]]`` keeps the digest it always had.
    """
    entries = sorted(
        ({"path": a.path, "sha256": a.sha256, "size": a.size} for a in assets),
        key=lambda e: e["path"],
    )
    declared = sorted((c.declaration() for c in declared_consumers(assets)), key=lambda d: d["name"])
    hub = hubtable.digest_records(assets)
    extras = {"consumers": declared} if declared else {}
    extras |= {"hub": hub} if hub else {}
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

"""Load, validate and select assets from a TOML manifest."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from bake.errors import ManifestError
from bake.hashes import SHA256_HEX

DEFAULT_MANIFEST = "docker/assets.toml"

_ALLOWED_KEYS = {"name", "path", "sha256", "urls", "size", "groups"}
_REQUIRED_KEYS = ("name", "path", "sha256", "urls")

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SCHEMES = ("https", "http", "file", "hf")


@dataclass(frozen=True)
class Asset:
    """One file to bake: where it goes, what it must hash to, where to get it."""

    name: str
    path: str
    sha256: str
    urls: tuple[str, ...]
    size: int | None = None
    groups: tuple[str, ...] = ()

    def canonical_url(self) -> str | None:
        """Return the first ``https://`` URL, the one consumers derive cache names from."""
        return next((u for u in self.urls if u.startswith("https://")), None)


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


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``, for messages and reports.

    Plain string surgery, not urlsplit: it must also work on a URL too broken to parse.
    """
    scheme, sep, rest = url.partition("://")
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    userinfo, at, hostport = rest[:end].rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{hostport}{rest[end:]}"


def check_url(url: str, *, allow_http: bool, where: str) -> None:
    """Raise ManifestError unless ``url`` parses and has an allowed scheme.

    ``where`` names the asset (or option) in the message; a password in the
    URL never reaches it.
    """
    shown = redact_url(url)
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


def _check_path(path: object, where: str) -> str:
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{where}: 'path' must be a non-empty string, got {path!r}")
    if "\\" in path or "\x00" in path:
        raise ManifestError(f"{where}: path {path!r} must be a POSIX path without backslashes")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise ManifestError(f"{where}: path {path!r} is absolute; give a path relative to --dest")
    if ".." in pure.parts or path != pure.as_posix() or path.endswith("/"):
        raise ManifestError(
            f"{where}: path {path!r} must be a normalised relative path with no '..' "
            f"(expected something like {pure.as_posix().lstrip('./') or 'dir/file'!r})"
        )
    if pure.name in ("SHA256SUMS", "bake.lock.json") and len(pure.parts) == 1:
        raise ManifestError(f"{where}: path {path!r} is reserved for bake's own index files")
    return path


def _check_consumer_rules(asset: Asset, where: str) -> None:
    """Enforce the naming rules the consumer libraries impose on their cache files."""
    parts = PurePosixPath(asset.path).parts
    if parts[0] == "tiktoken":
        canonical = asset.canonical_url()
        if canonical is None:
            raise ManifestError(
                f"{where}: a tiktoken/ asset needs an https:// url; its cache name is "
                "the SHA-1 of that canonical url"
            )
        expected = "tiktoken/" + hashlib.sha1(canonical.encode()).hexdigest()
        if asset.path != expected:
            raise ManifestError(
                f"{where}: path {asset.path!r} is not the SHA-1 of its canonical url "
                f"{canonical!r}; expected path {expected!r}"
            )
    elif parts[0] == "s3tokenizer" and (
        len(parts) != 2 or not parts[1].endswith(".onnx") or parts[1] == ".onnx"
    ):
        raise ManifestError(
            f"{where}: path {asset.path!r} must be s3tokenizer/<model>.onnx, "
            "the name s3tokenizer.load_model() looks for"
        )


def parse_asset(raw: object, index: int, *, allow_http: bool = False) -> Asset:
    """Validate one ``[[asset]]`` table and return it as an Asset.

    Raises ManifestError naming the asset and the broken rule.
    """
    if not isinstance(raw, dict):
        raise ManifestError(f"asset #{index + 1}: expected a table, got {type(raw).__name__}")
    name = raw.get("name")
    where = f"asset {name!r}" if isinstance(name, str) and name else f"asset #{index + 1}"
    unknown = sorted(set(raw) - _ALLOWED_KEYS)
    if unknown:
        raise ManifestError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed keys are "
            f"{', '.join(sorted(_ALLOWED_KEYS))}"
        )
    missing = [k for k in _REQUIRED_KEYS if k not in raw]
    if missing:
        raise ManifestError(f"{where}: missing required key(s) {', '.join(missing)}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ManifestError(
            f"{where}: name {name!r} must be a non-empty string of letters, digits, '.', '_' or '-'"
        )
    sha = raw["sha256"]
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
    groups = raw.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise ManifestError(f"{where}: groups must be a list of names, got {groups!r}")
    asset = Asset(
        name=name,
        path=_check_path(raw["path"], where),
        sha256=sha.lower(),
        urls=tuple(urls),
        size=size,
        groups=tuple(groups),
    )
    _check_consumer_rules(asset, where)
    return asset


def _load_toml(text: str, source: str) -> dict:
    try:
        import tomllib  # novermin - Python 3.10 falls back to the vendored tomli
    except ModuleNotFoundError:
        from bake._vendor import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML: {exc}; fix the line named") from None


def parse_manifest(text: str, *, source: str = "<manifest>", allow_http: bool = False) -> list[Asset]:
    """Parse manifest text and return its assets in file order.

    Raises ManifestError for any broken rule, naming the asset.
    """
    data = _load_toml(text, source)
    extra = sorted(set(data) - {"asset"})
    if extra:
        raise ManifestError(
            f"{source}: unknown top-level key(s) {', '.join(extra)}; only [[asset]] tables are allowed"
        )
    raw_assets = data.get("asset")
    if raw_assets is not None and not isinstance(raw_assets, list):
        raise ManifestError(f"{source}: 'asset' must be an array of tables written [[asset]], not [asset]")
    if not raw_assets:
        raise ManifestError(f"{source}: no [[asset]] tables found; a manifest lists at least one asset")
    assets = [parse_asset(raw, i, allow_http=allow_http) for i, raw in enumerate(raw_assets)]
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
    return assets


def _check_path_prefixes(assets: list[Asset]) -> None:
    """A path may not be a directory of another asset (a/b vs a/b/c)."""
    paths = {a.path: a.name for a in assets}
    for asset in assets:
        for parent in PurePosixPath(asset.path).parents:
            if str(parent) in paths:
                raise ManifestError(
                    f"asset {asset.name!r}: path {asset.path!r} lies under {str(parent)!r}, "
                    f"which is the file of asset {paths[str(parent)]!r}"
                )


def load_manifest(path: str | Path, *, allow_http: bool = False) -> list[Asset]:
    """Read and validate a manifest file. Raises ManifestError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"manifest {str(path)!r}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ManifestError(f"manifest {str(path)!r}: not UTF-8 text") from None
    return parse_manifest(text, source=str(path), allow_http=allow_http)


def select(assets: list[Asset], groups: list[str] | tuple[str, ...] = ()) -> list[Asset]:
    """Return the assets a consumer asked for.

    With no groups, every asset. Otherwise the assets in any named group plus
    the shared assets that name no group. Raises ManifestError for a group no
    asset names.
    """
    if not groups:
        return list(assets)
    known = {g for a in assets for g in a.groups}
    unknown = [g for g in groups if g not in known]
    if unknown:
        raise ManifestError(
            f"group(s) {', '.join(map(repr, unknown))} are named by no asset; "
            f"known groups: {', '.join(sorted(known)) or 'none'}"
        )
    wanted = set(groups)
    return [a for a in assets if not a.groups or wanted & set(a.groups)]


def manifest_digest(assets: list[Asset]) -> str:
    """Return the sha256 of the canonical JSON of the selected assets' path, size and sha256.

    It is computed from the manifest alone (a missing size is ``null``), so a
    build can name the content before fetching anything.
    """
    entries = sorted(
        ({"path": a.path, "sha256": a.sha256, "size": a.size} for a in assets),
        key=lambda e: e["path"],
    )
    canonical = json.dumps(entries, sort_keys=True, separators=(",", ":"))
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

"""The rules a path under the destination keeps: relative, normalised, printable, and short enough to hold."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import PurePosixPath

from bake.control_chars import has_control
from bake.errors import ManifestError

# A path component leaves room for the staging name bake puts beside it
# (".NAME.bake-staging.HOST.PID.N", HOST up to 64 bytes) within NAME_MAX, 255 bytes.
MAX_COMPONENT_BYTES = 255 - 100
# A whole asset path stays far below PATH_MAX (4096), whatever --dest is put before it.
MAX_PATH_BYTES = 1024


def parents(name: str) -> list[str]:
    """The directories a plain path lies in, outermost first (none for a name at the top)."""
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def check_path(path: object, where: str, reserved: Collection[str] = ()) -> str:
    """Return ``path`` when a file may be placed there, and is no ``reserved`` name at the top.

    Raises ManifestError naming ``where`` and the broken rule.
    """
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
    check_path_length(path, where)
    if pure.name in reserved and len(pure.parts) == 1:
        raise ManifestError(f"{where}: path {path!r} is reserved for bake's own index files")
    return path


def check_path_length(path: str, where: str) -> None:
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

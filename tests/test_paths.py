"""bake.paths: the rules an asset path keeps (relative, normalised, printable, short), each named."""

from __future__ import annotations

import pytest

from bake.errors import ManifestError
from bake.paths import MAX_COMPONENT_BYTES, MAX_PATH_BYTES, check_path, check_path_length, parents


@pytest.mark.parametrize(
    ("name", "expected"),
    [("file", []), ("a/file", ["a"]), ("a/b/c/file", ["a", "a/b", "a/b/c"])],
)
def test_parents_are_the_directories_outermost_first(name: str, expected: list[str]) -> None:
    assert parents(name) == expected


@pytest.mark.parametrize("path", ["m.onnx", "tiktoken/abc", "hub/models--o--r/blobs/e", "é/ü.bin", "a b/c"])
def test_a_good_path_is_returned_as_it_is(path: str) -> None:
    assert check_path(path, "asset x") == path


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("", "'path' must be a non-empty string, got ''"),
        (3, "'path' must be a non-empty string, got 3"),
        ("a\nb", "holds control characters"),
        ("a\\b", "must be a POSIX path without backslashes"),
        ("/etc/passwd", "is absolute; give a path relative to --dest"),
        ("a/../b", "must be a normalised relative path with no '..'"),
        ("./a", "(expected something like 'a')"),
        ("a//b", "(expected something like 'a/b')"),
        ("dir/", "must be a normalised relative path"),
        (".", "path '.' is --dest itself"),
    ],
)
def test_a_bad_path_is_a_manifest_error_naming_where_and_the_rule(path: object, says: str) -> None:
    with pytest.raises(ManifestError) as caught:
        check_path(path, "asset x")
    assert str(caught.value).startswith("asset x: ") and says in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_reserved_name_is_refused_at_the_top_only() -> None:
    with pytest.raises(ManifestError, match="reserved for bake's own index files"):
        check_path("SHA256SUMS", "asset x", reserved={"SHA256SUMS"})
    assert check_path("sub/SHA256SUMS", "asset x", reserved={"SHA256SUMS"}) == "sub/SHA256SUMS"


def test_lengths_are_counted_in_utf8_bytes_up_to_the_limits() -> None:
    check_path_length("a" * MAX_COMPONENT_BYTES, "asset x")
    with pytest.raises(ManifestError, match=f"longer than {MAX_COMPONENT_BYTES} bytes"):
        check_path_length("é" * (MAX_COMPONENT_BYTES // 2 + 1), "asset x")  # 2 bytes a character
    whole = "/".join(["d" * 100] * 10) + "/" + "f" * 14  # exactly MAX_PATH_BYTES, 1024
    assert len(whole) == MAX_PATH_BYTES
    check_path_length(whole, "asset x")
    with pytest.raises(ManifestError, match=f"longer than {MAX_PATH_BYTES} bytes; choose a shorter path"):
        check_path_length(whole + "f", "asset x")

"""Hostile manifests and arguments: each ends in exit 2 with a one-line reason, never a traceback or a hang.

Covers issue 10's classes 4 (bounded manifests, impossible paths, numeric options, the --json
report path) and 5 (control characters refused in input, escaped in output). Every manifest
names a valid first asset on a live loopback mirror, so a check that ran after fetching shows
as traffic or as files under --dest.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import asset_entry, bake, blob, files_under, manifest_text, sha256

GOOD = blob(4_000, "hostile-good")
CONTROL_CHARACTERS = {
    "tab": "\t",
    "newline": "\n",
    "carriage-return": "\r",
    "escape": "\x1b",
    "nul": "\x00",
    "delete": "\x7f",
    "c1-next-line": "\x85",
    "c1-csi": "\x9b",
}


@pytest.fixture
def good(mirror: Mirror) -> dict[str, object]:
    mirror.add("/good.bin", GOOD)
    return asset_entry("good", "a/good.bin", GOOD, mirror.url("/good.bin"))


def run_manifest(tmp_path: Path, text: str, *extra: str, timeout: float = 60):
    manifest = tmp_path / "assets.toml"
    manifest.write_text(text, encoding="utf-8")
    return bake(
        "fetch", "--manifest", manifest, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "cache",
        "--timeout", "5", *extra, timeout=timeout,
    )  # fmt: skip


def assert_refused(result, mirror: Mirror, tmp_path: Path, names: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert names in result.stderr
    assert result.stderr.startswith("bake: error:")
    assert sum(mirror.requests.values()) == 0, "the bad input was refused only after fetching"
    assert files_under(tmp_path / "dest") == []


def bad_entry(**overrides: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": "bad",
        "path": "b/bad.bin",
        "sha256": sha256(b"bad"),
        "urls": ["https://example.invalid/bad.bin"],
    }
    entry.update(overrides)
    return entry


@pytest.mark.parametrize("char", CONTROL_CHARACTERS.values(), ids=CONTROL_CHARACTERS.keys())
@pytest.mark.parametrize("where", ["path", "url", "group"])
def test_control_characters_are_refused_naming_the_asset(
    where: str, char: str, good: dict, mirror: Mirror, tmp_path: Path
) -> None:
    entry = {
        "path": bad_entry(path=f"b/bad{char}\n0000  SHA256SUMS"),
        "url": bad_entry(urls=[f"https://example.invalid/bad{char}.bin"]),
        "group": bad_entry(groups=[f"omni{char}"]),
    }[where]
    result = run_manifest(tmp_path, manifest_text([good, entry]))
    assert_refused(result, mirror, tmp_path, "asset 'bad'")
    assert "control character" in result.stderr
    # The refusal itself prints the hostile text escaped: one error line, no raw control byte.
    assert result.stderr.count("\n") == 1
    assert not any(c in result.stderr.rstrip("\n") for c in CONTROL_CHARACTERS.values())


@pytest.mark.parametrize(
    "path, names",
    [
        (".", "path '.'"),
        ("x" * 256, "longer than"),
        ("d/" + "é" * 128, "longer than"),  # 256 bytes in UTF-8, 130 characters
        ("/".join(["d" * 100] * 11), "longer than"),
    ],
    ids=["dot", "component-over-name-max", "component-over-name-max-in-bytes", "path-over-1024-bytes"],
)
def test_paths_no_filesystem_can_hold_are_refused(
    path: str, names: str, good: dict, mirror: Mirror, tmp_path: Path
) -> None:
    result = run_manifest(tmp_path, manifest_text([good, bad_entry(path=path)]))
    assert_refused(result, mirror, tmp_path, "asset 'bad'")
    assert names in result.stderr


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
        "a = " + "{ b = " * 50_000 + "1" + " }" * 50_000 + "\n",
        ".".join(["k"] * 200_000) + " = 1\n",
        '"k".' * 100_000 + '"k" = 1\n',
        "[" + ".".join(["t"] * 100_000) + "]\n",
    ],
    ids=["arrays", "inline-tables", "dotted-key", "quoted-dotted-key", "table-header"],
)
def test_deep_nesting_is_refused_before_parsing(
    text: str, good: dict, mirror: Mirror, tmp_path: Path
) -> None:
    started = time.monotonic()
    result = run_manifest(tmp_path, manifest_text([good]) + text, timeout=30)
    assert_refused(result, mirror, tmp_path, "nested more than")
    assert time.monotonic() - started < 10, "the bound must be checked cheaply, before the parser runs"


def test_a_manifest_over_32_mib_is_refused_unread(good: dict, mirror: Mirror, tmp_path: Path) -> None:
    padding = "# " + "x" * 1022 + "\n"
    result = run_manifest(tmp_path, manifest_text([good]) + padding * (32 * 1024 + 1))
    assert_refused(result, mirror, tmp_path, "32 MiB")


def test_the_bounds_admit_a_real_manifest_with_floats_and_comments(mirror: Mirror, tmp_path: Path) -> None:
    mirror.add("/good.bin", GOOD)
    text = "# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ a comment is not nesting\n" + manifest_text(
        [asset_entry("good", "a/good.bin", GOOD, mirror.url("/good.bin") + "?v=" + "[" * 40)]
    )
    result = run_manifest(tmp_path, text)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dest/a/good.bin").read_bytes() == GOOD


NUMBERS = ["inf", "-inf", "nan", "-1", "0", "1e400", "99999999999999999999", "x"]


@pytest.mark.parametrize("value", NUMBERS)
@pytest.mark.parametrize("option", ["--timeout", "--deadline", "--connections", "--attempts", "--jobs"])
def test_numeric_options_outside_their_range_are_usage_errors(
    option: str, value: str, good: dict, mirror: Mirror, tmp_path: Path
) -> None:
    result = run_manifest(tmp_path, manifest_text([good]), f"{option}={value}")
    assert_refused(result, mirror, tmp_path, option)


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_cache_prune_max_age_outside_its_range_is_a_usage_error(value: str, tmp_path: Path) -> None:
    result = bake("cache", "prune", "--cache-dir", tmp_path, f"--max-age={value}")
    assert result.returncode == 2, result.stderr
    assert "--max-age" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["missing-directory", "a-directory", "a-file-in-place-of-the-directory"])
def test_an_unwritable_report_path_is_refused_before_fetching(
    where: str, good: dict, mirror: Mirror, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    report = {
        "missing-directory": tmp_path / "no/such/dir/report.json",
        "a-directory": tmp_path,
        "a-file-in-place-of-the-directory": tmp_path / "file/report.json",
    }[where]
    result = run_manifest(tmp_path, manifest_text([good]), "--json", str(report))
    assert_refused(result, mirror, tmp_path, "--json")


def test_a_report_that_fails_after_install_is_a_named_exit_with_the_assets_in_place(
    good: dict, mirror: Mirror, tmp_path: Path
) -> None:
    # /dev/full passes every check made beforehand and fails the write itself (ENOSPC).
    result = run_manifest(tmp_path, manifest_text([good]), "--json", "/dev/full")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "--json '/dev/full'" in result.stderr and "installed and verified" in result.stderr
    # The index files come first, so the destination is complete and checkable.
    assert files_under(tmp_path / "dest") == ["SHA256SUMS", "a/good.bin", "bake.lock.json"]


def test_untrusted_text_in_messages_is_printed_escaped(good: dict, mirror: Mirror, tmp_path: Path) -> None:
    # A server's redirect target is untrusted text that reaches the retry log and the error;
    # these bytes would clear the screen (ESC [2J) and move the cursor (C1 CSI) if printed raw.
    mirror.redirect("/evil.bin", "/gone\x1b[2J\x9bH\r")
    entry = bad_entry(urls=[mirror.url("/evil.bin")])
    result = run_manifest(tmp_path, manifest_text([good, entry]), "--attempts", "1", "--deadline", "20")
    assert result.returncode == 3, result.stderr
    assert "/gone\\x1b[2J\\x9bH" in result.stderr
    assert not any(c in result.stderr for c in "\x1b\x9b\r")

"""The options several commands share (bake/commands/options.py): the default manifest's absence
explained, defaults printed from the parser, and how numbers, sizes and the image selection parse."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from bake.byte_sizes import GIB, KIB, MIB, TIB
from bake.cli import build_parser
from bake.commands import options
from bake.errors import ManifestError, UsageError
from tests.runners import bake


@pytest.mark.parametrize(
    "argv",
    [
        ["fetch", "--dest", "d"],
        ["seal", "--dest", "d"],
        ["manifest", "digest"],
        ["publish", "--repository", "127.0.0.1:5000/x"],
        ["add", "file:///x.bin", "--path", "d/x.bin"],
    ],
    ids=lambda argv: argv[0],
)
def test_the_default_manifest_s_absence_is_explained(argv: list[str], tmp_path: Path) -> None:
    proc = bake(*argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.count("bake: error:") == 1 and "docker/assets.toml" in line, line
    assert "no --manifest given" in line and "BAKE_MANIFEST" in line and str(tmp_path) in line, line


def test_a_value_default_is_printed_from_the_parser() -> None:
    text = " ".join(build_parser()._subparsers._group_actions[0].choices["fetch"].format_help().split())
    assert "attempts per source (default: 5)" in text or "attempts per source (default 5)" in text, text
    assert "5% of the filesystem" in text, text  # the rule that made --help crash, shown as written


def _fetch_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["fetch", "--dest", "d", *argv])


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 1048576), ("512M", 512 * MIB), ("16G", 16 * GIB), ("1.5GiB", int(1.5 * GIB)),
     ("2kb", 2 * KIB), (" 3 T ", 3 * TIB)],
)  # fmt: skip
def test_a_size_takes_binary_units(text: str, size: int) -> None:
    assert _fetch_args("--max-size", text).max_size == size
    assert _fetch_args("--min-free", text).min_free == size


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-size", "12X"],
        ["--min-free", "-1"],
        ["--max-size", "9000000T"],
        ["--connections", "0"],
        ["--attempts", "1025"],
        ["--jobs", "two"],
        ["--timeout", "0"],
        ["--deadline", "nan"],
        ["--timeout", "inf"],
    ],
    ids=" ".join,
)
def test_a_number_out_of_bounds_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(UsageError, match=f"argument {argv[0]}: expected ") as caught:
        _fetch_args(*argv)
    assert caught.value.exit_code == 2


def test_the_numbers_at_their_bounds_are_taken() -> None:
    args = _fetch_args(
        "--connections", "1024", "--attempts", "1", "--timeout", "0.5", "--deadline", "1000000"
    )
    assert (args.connections, args.attempts, args.timeout, args.deadline) == (1024, 1, 0.5, 1e6)


@pytest.mark.parametrize(
    ("words", "passed"), [(["--", "--pull"], ["--pull"]), (["--pull"], ["--pull"]), ([], []), (["--"], [])]
)
def test_only_the_first_double_dash_is_dropped_before_buildx(words: list[str], passed: list[str]) -> None:
    assert options.passed_on(words) == passed


def test_the_image_selection_defaults_the_manifest_and_names_bake_manifest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BAKE_MANIFEST", raising=False)
    args = build_parser().parse_args(["publish", "--repository", "r.example/x"])
    options.check_image_selection(args)
    assert args.manifest == "docker/assets.toml" and not isinstance(args.manifest, options.FromEnv)
    monkeypatch.setenv("BAKE_MANIFEST", "site/assets.toml")
    args = build_parser().parse_args(["publish", "--repository", "r.example/x"])
    options.check_image_selection(args)
    assert args.manifest == "site/assets.toml" and isinstance(args.manifest, options.FromEnv)
    runtime = build_parser().parse_args(
        ["publish", "--runtime", "--group", "g", "--repository", "r.example/x"]
    )
    with pytest.raises(UsageError, match="it takes no --manifest or --group"):
        options.check_image_selection(runtime)


def test_an_error_about_a_manifest_bake_manifest_named_says_so(tmp_path: Path) -> None:
    named = options.FromEnv(str(tmp_path / "m.toml"))
    with pytest.raises(ManifestError) as caught, options.naming_the_variable(named):
        raise ManifestError("m.toml: no such file")
    assert (
        str(caught.value)
        == "m.toml: no such file (BAKE_MANIFEST names it: fix the variable, or pass --manifest)"
    )
    with pytest.raises(UsageError) as plain, options.naming_the_variable(str(tmp_path / "m.toml")):
        raise UsageError("m.toml: no such file")
    assert str(plain.value) == "m.toml: no such file"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "--no-origin needs at least one --mirror (or BAKE_MIRRORS)"),
        ({"BAKE_MIRRORS": "no-equals-sign"}, "BAKE_MIRRORS: "),
    ],
    ids=["no-origin without a mirror", "a bad BAKE_MIRRORS"],
)
def test_fetch_options_refuse_a_setting_that_could_fetch_nothing(
    env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("BAKE_MIRRORS", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=re.escape(says)):
        options.fetch_options(_fetch_args("--no-origin", "--cache-dir", str(tmp_path)))


def test_fetch_options_carry_the_parsed_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BAKE_MIRRORS", "https://a.example/=https://m.example/a/")
    engine = options.fetch_options(
        _fetch_args(
            "--cache-dir", str(tmp_path), "--mirror", "https://b.example/=file:///srv/b/", "--jobs", "3"
        )
    )
    assert (engine.cache_dir, engine.jobs, len(engine.mirrors)) == (tmp_path, 3, 2)

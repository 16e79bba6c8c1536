"""bake.locations: the one location resolver, fallback chains included, checked against huggingface_hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bake import consumers
from bake.consumers import HUB_CACHE as CACHE
from bake.consumers import HUB_CHAIN_IDS as CHAIN_IDS
from bake.locations import Location

SERVE_LOC = "hub.0"  # the Hub's one served location

# huggingface_hub's precedence, each case a set of variables a job may carry.
HUB_CASES = {
    "nothing set": {},
    "HF_HUB_CACHE": {"HF_HUB_CACHE": "/srv/hub-cache"},
    "HUGGINGFACE_HUB_CACHE": {"HUGGINGFACE_HUB_CACHE": "/srv/legacy"},
    "HF_HUB_CACHE beats the legacy name": {"HF_HUB_CACHE": "/srv/a", "HUGGINGFACE_HUB_CACHE": "/srv/b"},
    "HF_HOME": {"HF_HOME": "/srv/hf"},
    "HF_HOME beats XDG_CACHE_HOME": {"HF_HOME": "/srv/hf", "XDG_CACHE_HOME": "/srv/xdg"},
    "XDG_CACHE_HOME": {"XDG_CACHE_HOME": "/srv/xdg"},
    "relative HF_HOME": {"HF_HOME": "rel/hf"},
    # Set but empty: huggingface_hub reads "" as a path, the working directory (os.getenv with a default).
    "HF_HOME empty": {"HF_HOME": ""},
    "XDG_CACHE_HOME empty": {"XDG_CACHE_HOME": ""},
    "HF_HUB_CACHE empty": {"HF_HUB_CACHE": ""},
    "HUGGINGFACE_HUB_CACHE empty": {"HUGGINGFACE_HUB_CACHE": ""},
    "HF_HUB_CACHE empty, HF_HOME set": {"HF_HUB_CACHE": "", "HF_HOME": "/srv/hf"},
}


def huggingface_hub_cache(environ: dict[str, str], home: Path, cwd: Path) -> str:
    """The cache directory huggingface_hub itself computes under ``environ`` (a fresh interpreter)."""
    code = (
        "import json, os; from huggingface_hub import constants; "
        "print(json.dumps(os.path.abspath(constants.HF_HUB_CACHE)))"
    )
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **environ}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(proc.stdout)


@pytest.mark.parametrize("environ", HUB_CASES.values(), ids=HUB_CASES.keys())
def test_the_hub_chain_resolves_where_huggingface_hub_looks(
    environ: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.chdir(tmp_path)
    expected = huggingface_hub_cache(environ, home, tmp_path)
    assert str(CACHE.resolve({"HOME": str(home), **environ})) == expected


def test_the_hub_chain_is_written_fallback_first() -> None:
    records = CACHE.records(SERVE_LOC, "hub", CHAIN_IDS)
    assert [r.id for r in records] == ["hub.xdg", "hub.home", "hub.legacy", "hub.0"]
    assert [r.consumer for r in records] == ["-", "-", "-", "hub"]
    assert [r.fallback for r in records] == ["$HOME/.cache", "@hub.xdg", "@hub.home", "@hub.legacy"]


def test_a_location_comes_back_from_its_records() -> None:
    known: dict[str, Location] = {}
    for r in CACHE.records(SERVE_LOC, "hub", CHAIN_IDS):
        known[r.id] = Location.from_record(r.mode, r.var, r.sub, r.fallback, known)
    assert known[SERVE_LOC] == CACHE
    assert str(known[SERVE_LOC]) == str(CACHE)


@pytest.mark.parametrize(
    ("location", "inside"),
    [
        ("${XDG_CACHE_HOME:-$HOME/.cache}/huggingface", True),
        ("$HF_HOME", True),
        ("${HF_HOME:-/x}/hub/models--a--b", True),
        ("${XDG_CACHE_HOME:-$HOME/.cache}/whisper", False),
        ("$TIKTOKEN_CACHE_DIR", False),
    ],
)
def test_nesting_follows_every_fallback(location: str, inside: bool) -> None:
    from bake.locations import parse_location

    assert parse_location(location, "test").nests_with(CACHE) is inside


def test_relative_xdg_resolves_against_cwd(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (location,) = consumers.S3Tokenizer().locations
    assert location.resolve({"XDG_CACHE_HOME": "rel"}) == tmp_path / "rel/s3tokenizer"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/s3tokenizer", id="set"),
        # s3tokenizer's os.getenv("XDG_CACHE_HOME", default) takes "" as a path: the working directory.
        # The entrypoint never serves there; it exports XDG_CACHE_HOME with the default it served.
        pytest.param({"XDG_CACHE_HOME": "", "HOME": "/h"}, f"{os.getcwd()}/s3tokenizer", id="empty-is-cwd"),
        pytest.param({"HOME": "/h"}, "/h/.cache/s3tokenizer", id="unset"),
    ],
)
def test_under_location_falls_back_to_its_default(environ: dict, expected: str) -> None:
    (location,) = consumers.S3Tokenizer().locations
    assert location.resolve(environ) == Path(expected)


def test_unset_home_falls_back_to_the_password_database() -> None:
    import pwd

    (location,) = consumers.S3Tokenizer().locations
    home = pwd.getpwuid(os.getuid()).pw_dir
    assert location.resolve({}) == Path(home, ".cache/s3tokenizer")

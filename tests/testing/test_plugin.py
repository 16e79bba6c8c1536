"""bake.testing.plugin: its usage errors, raised only when its tests are selected, and its pure parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bake.testing.plugin import Broken, Facts, NoImage, NotApplicable, _hub_repos, _params
from bake.testing.serve import Link, Location, Serve, ServedFile
from tests.runners import pytest_run as _pytest


def test_no_image_is_a_usage_error_naming_how_to_give_one(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--bake-image IMAGE or BAKE_IMAGE=IMAGE" in proc.stderr


def test_no_image_is_no_error_when_its_tests_are_not_selected(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing", "-k", "no_such_test")
    assert proc.returncode == 5, proc.stdout + proc.stderr  # pytest's "no tests collected"


def test_other_projects_pytest_runs_are_unchanged(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text("def test_mine():\n    assert 1\n")
    proc = _pytest(tmp_path, "-q")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def test_an_image_the_engine_cannot_give_is_a_usage_error(tmp_path: Path) -> None:
    # An unreachable engine (or one without the image) makes the same exit code, naming the cause.
    proc = _pytest(
        tmp_path, "--pyargs", "bake.testing", DOCKER_HOST=f"unix://{tmp_path}/no.sock", BAKE_IMAGE="x:y"
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "bake.testing: the Docker engine does not answer" in proc.stderr


def test_an_empty_secret_pattern_is_a_usage_error(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing", "--bake-secret-pattern", "")
    assert proc.returncode == 4 and "--bake-secret-pattern is empty" in proc.stderr, proc.stdout + proc.stderr


def test_an_image_and_local_mode_together_are_a_usage_error(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--pyargs", "bake.testing", "--bake-local", "--bake-image", "x:y")
    assert proc.returncode == 4 and "--bake-image and --bake-local both given" in proc.stderr, proc.stderr


# ---- the parameters collection gives each standard test, from what was read of the image ---------

ASSET = {"path": "tiktoken/abc", "size": 5, "sha256": "0" * 64}
LOCK = {"manifest_digest": "m", "assets": [ASSET]}
VOCAB = Location("tiktoken.0", "tiktoken", "export", "TIKTOKEN_CACHE_DIR", "", "")
HELPER = Location("hub.xdg", "-", "under", "XDG_CACHE_HOME", "huggingface", "$HOME/.cache")
SERVE = Serve((HELPER, VOCAB), (ServedFile("tiktoken.0", "tiktoken/abc", "abc", 5),))


@pytest.mark.parametrize(
    ("name", "facts", "expected"),
    [
        (
            "bake_secret_pattern",
            Facts("x:y"),
            [(NotApplicable("no --bake-secret-pattern given"), "no-pattern")],
        ),
        ("bake_secret_pattern", Facts(None, patterns=["a", "b"]), [(0, "pattern-1"), (1, "pattern-2")]),
        ("bake_asset", Facts(None), [(NoImage(), "no-image")]),
        ("bake_asset", Facts("x:y", error="no engine"), [(Broken("no engine"), "bake.lock.json")]),
        ("bake_location", Facts("x:y", problem="lock gone"), [(Broken("lock gone"), "bake.lock.json")]),
        ("bake_asset", Facts("x:y", lock=LOCK), [(ASSET, "tiktoken/abc")]),
        (
            "bake_asset",
            Facts("x:y", lock={"assets": []}),
            [(NotApplicable("bake.lock.json lists no asset"), "no-asset")],
        ),
        ("bake_location", Facts("x:y", lock=LOCK, serve=SERVE), [(VOCAB, "tiktoken.0:$TIKTOKEN_CACHE_DIR")]),
        (
            "bake_location",
            Facts("x:y", lock=LOCK, serve_problem="bake.serve:2: expected a loc"),
            [(Broken("bake.serve:2: expected a loc"), "bake.serve")],
        ),
        (
            "bake_hub_repo",
            Facts("x:y", lock=LOCK, serve=SERVE),
            [(NotApplicable("the image bakes no Hub repository"), "no-hub-repository")],
        ),
    ],
    ids=[
        "no pattern",
        "two patterns",
        "no image",
        "no engine",
        "no lock",
        "an asset",
        "no asset",
        "a location, helpers left out",
        "a broken bake.serve",
        "no hub repository",
    ],
)
def test_each_parameter_is_a_value_a_broken_lock_or_not_applicable(name: str, facts: Facts, expected) -> None:
    assert _params(name, facts) == expected


def test_doctor_checks_a_library_whose_consumer_is_served_and_each_declared_consumer() -> None:
    declared = Location("nltk.0", "nltk", "export", "NLTK_DATA", "", "")
    params = dict(
        (i, v)
        for v, i in _params("bake_doctor_library", Facts("x:y", lock=LOCK, serve=Serve((VOCAB, declared))))
    )
    assert params["tiktoken"] == "tiktoken" and params["nltk-declared"] == "nltk"
    assert params["s3tokenizer"] == NotApplicable("the image bakes nothing for s3tokenizer (s3tokenizer)")


def test_hub_repositories_are_read_from_the_snapshot_links_of_bake_serve() -> None:
    links = (
        Link("hub.0", "models--org--tiny/snapshots/c0ffee/config.json", "../../blobs/a"),
        Link("hub.0", "models--org--tiny/snapshots/c0ffee/sub/weights.bin", "../../../blobs/b"),
        Link("hub.0", "datasets--org--set/snapshots/beef/data.csv", "../../blobs/c"),
        Link("hub.0", "models--org--tiny/refs", "elsewhere"),
        Link("other.0", "plain/link", "target"),
    )
    assert _hub_repos(Serve(links=links)) == [
        {
            "repo_type": "model",
            "repo_id": "org/tiny",
            "revision": "c0ffee",
            "files": ["config.json", "sub/weights.bin"],
        },
        {"repo_type": "dataset", "repo_id": "org/set", "revision": "beef", "files": ["data.csv"]},
    ]

"""bake.testing.probes: the programs a job runs to see what a consumer would see, run here with python3.

Each takes its JSON argument and prints one JSON report; here they run as children of this
interpreter on files in tmp_path, as ``--bake-local`` runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from bake.testing import probes
from bake.testing.local import OWN_LIB
from bake.testing.serve import Link, Location, ServedFile


def probe(program: str, argument: object, **env: str) -> dict:
    """Run ``program`` with its JSON argument; return its report."""
    proc = subprocess.run(
        [sys.executable, "-c", program, json.dumps(argument)], env={**os.environ, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_installed_names_each_distributions_version_or_none() -> None:
    import importlib.metadata

    report = probe(probes.INSTALLED, ["pytest", "no-such-distribution-here"])
    assert report == {"pytest": importlib.metadata.version("pytest"), "no-such-distribution-here": None}


def test_locations_reports_each_served_file_and_link_as_the_job_sees_it(tmp_path: Path) -> None:
    root, served = tmp_path / "assets", tmp_path / "served"
    (root / "tiktoken").mkdir(parents=True)
    served.mkdir()
    for name in ("good", "copied", "short", "other", "missing"):
        (root / "tiktoken" / name).write_bytes(b"vocab")
    (served / "good").symlink_to(root / "tiktoken/good")
    (served / "copied").write_bytes(b"vocab")
    (served / "short").write_bytes(b"voc")
    (served / "other").write_bytes(b"VOCAB")
    (served / "alias").symlink_to("good")
    (served / "gone").symlink_to("nowhere")
    here = Location("tiktoken.0", "tiktoken", "export", "TIKTOKEN_CACHE_DIR", "", "")
    unset = Location("s3tokenizer.0", "s3tokenizer", "export", "S3_UNSET_FOR_THE_PROBE", "", "")
    names = ("good", "copied", "short", "other", "missing")
    config = {
        "root": str(root),
        "lib": OWN_LIB,
        "locations": [asdict(here), asdict(unset)],
        "files": [asdict(ServedFile("tiktoken.0", f"tiktoken/{n}", n, 5)) for n in names]
        + [asdict(ServedFile("s3tokenizer.0", "s3tokenizer/m.onnx", "m.onnx", 1))],
        "links": [asdict(Link("tiktoken.0", "alias", "good")), asdict(Link("tiktoken.0", "gone", "nowhere"))],
    }
    report = probe(probes.LOCATIONS, config, TIKTOKEN_CACHE_DIR=str(served))
    assert report == {
        "tiktoken.0": {
            "dir": str(served),
            "files": {
                "good": None,
                "copied": None,
                "short": "3 bytes, expected 5",
                "other": "different bytes from the baked file",
                "missing": "missing",
            },
            "links": {"alias": None, "gone": "a dangling link"},
        },
        "s3tokenizer.0": {"dir": None, "files": {}, "links": {}},
    }


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    """A Hub cache holding one snapshot of org/tiny, as bake seals it: a link to a blob."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--tiny/snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    (cache / "models--org--tiny/blobs").mkdir()
    (cache / "models--org--tiny/blobs/e").write_text("{}\n")
    (snapshot / "config.json").symlink_to("../../blobs/e")
    return cache


def test_hub_resolves_a_baked_repository_offline_and_names_missing_files(hub_cache: Path) -> None:
    repo = {
        "repo_id": "org/tiny",
        "repo_type": "model",
        "revision": "c" * 40,
        "files": ["config.json", "x.bin"],
    }
    report = probe(probes.HUB, repo, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub_cache))
    assert report == {
        "path": str(hub_cache / "models--org--tiny/snapshots" / ("c" * 40)),
        "missing": ["x.bin"],
    }
    absent = probe(
        probes.HUB, {**repo, "repo_id": "org/absent"}, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub_cache)
    )
    assert list(absent) == ["error"] and absent["error"]

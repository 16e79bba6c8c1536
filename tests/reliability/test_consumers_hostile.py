"""A declared consumer may not serve inside the Hub's own cache (issue 18, defect 7).

Before, such a consumer passed ``seal``, and a job read the consumer's bytes at a Hub blob's
path. Its location nesting with any of huggingface_hub's lookup places is now exit 2, naming
the consumer, at ``seal`` and in the manifest check alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import bake

COMMIT = "85b76c7bbc69ed0f8905b0fada5b83cbfe6ed3e8"
BLOB = "2f96c4ab4d1b4a2d34b0f1c2e4a5b6c7d8e9f0a1"
SHA = "a" * 64
HUB_ENTRY = f"""
[[hub]]
repo = "org/tiny"
commit = "{COMMIT}"
files = [{{path = "config.json", size = 3, sha256 = "{SHA}", blob = "{BLOB}"}}]
"""

# Each of huggingface_hub's places, and places under them.
INSIDE_THE_HUB = [
    "$HF_HUB_CACHE",
    "${HF_HUB_CACHE:-/srv/hub}/models--org--tiny",
    "$HUGGINGFACE_HUB_CACHE",
    "$HF_HOME",
    "${HF_HOME:-/srv/hf}/hub",
    "${XDG_CACHE_HOME:-$HOME/.cache}/huggingface",
    "${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/hub/models--org--tiny/blobs",
]


def manifest(tmp_path: Path, location: str) -> Path:
    path = tmp_path / "assets.toml"
    path.write_text(
        f'[[consumer]]\nname = "intruder"\nlocations = ["{location}"]\n\n'
        f'[[asset]]\nname = "x"\npath = "intruder/{BLOB}"\nsha256 = "{SHA}"\nurls = ["file:///dev/null"]\n'
        + HUB_ENTRY
    )
    return path


@pytest.mark.parametrize("location", INSIDE_THE_HUB)
@pytest.mark.parametrize("command", ["seal", "check"])
def test_a_consumer_inside_the_hub_cache_is_refused(tmp_path: Path, location: str, command: str) -> None:
    path = manifest(tmp_path, location)
    if command == "seal":
        proc = bake("seal", "--manifest", path, "--dest", tmp_path / "dest")
    else:
        proc = bake("manifest", "check", "--manifest", path)
    assert proc.returncode == 2, proc.stderr
    assert "consumer 'intruder'" in proc.stderr and "nests with" in proc.stderr, proc.stderr
    assert "consumer 'hub'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize(
    "location", ["${XDG_CACHE_HOME:-$HOME/.cache}/whisper", "$NLTK_DATA", "${HF_HOME:-/x}/../y"]
)
def test_a_consumer_beside_the_hub_cache_is_not(tmp_path: Path, location: str) -> None:
    proc = bake("manifest", "--manifest", manifest(tmp_path, location))
    if ".." in location:  # not a location at all: refused by the grammar, not as an overlap
        assert proc.returncode == 2 and "nests with" not in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr

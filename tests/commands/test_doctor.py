"""``bake doctor``: whether each consumer would accept a sealed asset root's files, and the option it
names when there is no lock (bake/commands/doctor.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bake import consumers, index
from tests.commands.conftest import fetch
from tests.runners import bake


def test_doctor_exits_3_when_a_consumer_would_download(source: dict) -> None:
    assert fetch(source).returncode == 0
    dest = source["tmp"] / "dest"
    # Fetched but not sealed: the entrypoint would serve nothing, so every consumer would download.
    unsealed = bake("doctor", "--assets", str(dest))
    assert unsealed.returncode == 3 and "bake seal" in unsealed.stderr, unsealed.stderr
    assert bake("seal", "--manifest", str(source["manifest"]), "--dest", str(dest)).returncode == 0
    # The fixture's assets are no consumer's files, so nothing to judge: exit 0.
    assert bake("doctor", "--assets", str(dest)).returncode == 0
    vocab = b"vocab"
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    baked = source["tmp"] / "baked"
    (baked / "tiktoken").mkdir(parents=True)
    (baked / "tiktoken" / hashlib.sha1(url.encode()).hexdigest()).write_bytes(vocab)
    (baked / "bake.lock.json").write_text(
        json.dumps(
            {
                "assets": [
                    {
                        "path": f"tiktoken/{hashlib.sha1(url.encode()).hexdigest()}",
                        "size": 5,
                        "sha256": hashlib.sha256(vocab).hexdigest(),
                    }
                ]
            }
        )
    )
    # What seal writes beside the lock for the built-in consumers.
    (baked / "bake.serve").write_text(consumers.serve_text(consumers.table([]), index.read_lock(baked), {}))
    empty = source["tmp"] / "empty"
    empty.mkdir()
    result = bake(
        "doctor",
        "--assets",
        str(baked),
        env={"TIKTOKEN_RS_CACHE_DIR": str(empty), "TIKTOKEN_CACHE_DIR": str(empty)},
    )
    assert result.returncode == 3
    assert "WOULD DOWNLOAD  openai-harmony" in result.stdout
    assert "bake-entrypoint --print-env" in result.stderr


def test_doctor_without_a_lock_names_its_own_option(tmp_path: Path) -> None:
    proc = bake("doctor", "--assets", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "point --assets (or BAKE_ASSETS) at a baked asset root" in proc.stderr
    assert "--manifest" not in proc.stderr and "--dest" not in proc.stderr

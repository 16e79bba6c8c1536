"""Concurrency through the real CLI: 8 `bake fetch` processes, one cache, one transfer per asset.

The mirror is throttled so the processes really overlap (one of them must report waiting for
another), and it counts the bytes it sends: each asset's bytes cross the wire once.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.mirror import Mirror

from . import (
    INDEX_FILES,
    KIB,
    MIB,
    REPO,
    asset_entry,
    bake,
    bake_command,
    blob,
    cli_env,
    files_under,
    manifest_text,
    sha256,
)

PROCESSES = 8
ASSETS = {
    "checkpoint": ("s3tokenizer/speech_tokenizer_v3_25hz.onnx", blob(3 * MIB + 1, "checkpoint")),
    "shard": ("models/shard-00001.bin", blob(2 * MIB + 3, "shard")),
    "config": ("models/config.json", blob(3 * KIB, "config")),
}


@pytest.mark.parametrize("shared_dest", [False, True], ids=["own-destinations", "one-destination"])
def test_eight_processes_share_one_transfer_per_asset(tmp_path: Path, shared_dest: bool) -> None:
    files = {f"/{name}": data for name, (_, data) in ASSETS.items()}
    with Mirror(files, rate=MIB) as mirror:  # per connection: a 3 MiB asset takes most of a second
        manifest = tmp_path / "assets.toml"
        manifest.write_text(
            manifest_text(
                asset_entry(name, path, data, mirror.url(f"/{name}")) for name, (path, data) in ASSETS.items()
            )
        )
        dests = [tmp_path / ("dest" if shared_dest else f"dest{i}") for i in range(PROCESSES)]
        args = ["fetch", "--manifest", manifest, "--cache-dir", tmp_path / "cache", "--timeout", "10", "-q"]
        procs = [
            subprocess.Popen(
                bake_command(*args, "--dest", dest),
                env=cli_env(),
                cwd=REPO,
                stderr=subprocess.PIPE,
                text=True,
            )
            for dest in dests
        ]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        sent = dict(mirror.bytes_sent)
    assert [rc for rc, _ in results] == [0] * PROCESSES, results
    assert sent == {f"/{name}": len(data) for name, (_, data) in ASSETS.items()}  # once each, server side
    assert any("another bake process is fetching it" in err for _, err in results)  # they did overlap
    for dest in set(dests):
        assert files_under(dest) == sorted([*(path for path, _ in ASSETS.values()), *INDEX_FILES])
        for path, data in ASSETS.values():
            assert sha256((dest / path).read_bytes()) == sha256(data)
        verify = bake("verify", "--manifest", manifest, "--dest", dest)
        assert verify.returncode == 0, verify.stderr
    assert files_under(tmp_path / "cache" / "partial") == []

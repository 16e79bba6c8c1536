"""Measure 7: the entrypoint's start-up cost with the production-sized serve file (a checkpoint, a vocab)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ASSET_PATH, CHECKPOINT_URL, MIB, Profile, log
from bench.processes import run
from tests.assets import O200K_URL


def bench_entrypoint(profile: Profile, src: Path, work: Path) -> dict:
    """Measure 7: median wall time of `bake-entrypoint true` and of `true`, runs interleaved.

    Served: every location already served, as a job finds them after the first start in its
    container (TIKTOKEN_* set). Unset: TIKTOKEN_* unset, as in CI: each start makes its two
    job-local directories anew.
    """
    ep = work / "entrypoint"
    files = {
        ASSET_PATH: random.Random(1).randbytes(MIB),
        f"tiktoken/{hashlib.sha1(O200K_URL.encode()).hexdigest()}": random.Random(2).randbytes(64 * 1024),
    }
    lines = []
    for path, data in files.items():
        source = ep / "sources" / path.replace("/", "_")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(data)
        url = CHECKPOINT_URL if path.startswith("s3tokenizer/") else O200K_URL
        lines += [
            "[[asset]]", f'name = "{path.split("/")[0]}"', f'path = "{path}"',
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"', f"size = {len(data)}",
            f'urls = ["{source.as_uri()}", "{url}"]', "",
        ]  # fmt: skip
    manifest = ep / "assets.toml"
    manifest.write_text("\n".join(lines))
    assets = ep / "assets"
    log_path = work / "logs" / "entrypoint.log"
    # The image's layout, made the way the fetch stage makes it.
    bake = [sys.executable, "-m", "bake"]
    fetch = [
        "fetch",
        "--manifest",
        str(manifest),
        "--dest",
        str(assets),
        "--cache-dir",
        str(ep / "cache"),
        "-q",
    ]
    run([*bake, *fetch], log_path=log_path, cwd=src)
    run([*bake, "seal", "--manifest", str(manifest), "--dest", str(assets)], log_path=log_path, cwd=src)
    (ep / "home").mkdir()
    (ep / "tmp").mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(ep / "home"),
        "TMPDIR": str(ep / "tmp"),
        "BAKE_ASSETS": str(assets),
    }
    unset = dict(env)
    env |= {"TIKTOKEN_RS_CACHE_DIR": str(ep / "rs"), "TIKTOKEN_CACHE_DIR": str(ep / "gym")}
    entrypoint = ["/bin/sh", str(src / "scripts/entrypoint.sh"), "true"]
    true = [shutil.which("true") or "/bin/true"]
    for _ in range(3):  # serves every location, then stamps them: every timed run finds them served
        run(entrypoint, log_path=log_path, cwd=ep, env=env)

    def once(cmd: list[str], environ: dict[str, str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            cmd, env=environ, cwd=ep, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        return (time.perf_counter() - t0) * 1000

    with_ep, with_unset, bare = [], [], []
    for _ in range(profile.entrypoint_runs):
        with_ep.append(once(entrypoint, env))
        with_unset.append(once(entrypoint, unset))
        bare.append(once(true, env))
    result = {
        "runs": profile.entrypoint_runs,
        "shell": os.path.realpath("/bin/sh"),
        "median_ms_entrypoint_true": statistics.median(with_ep),
        "median_ms_entrypoint_true_unset": statistics.median(with_unset),
        "median_ms_true": statistics.median(bare),
    }
    result["overhead_ms"] = result["median_ms_entrypoint_true"] - result["median_ms_true"]
    result["overhead_ms_unset"] = result["median_ms_entrypoint_true_unset"] - result["median_ms_true"]
    log(f"entrypoint: {result['overhead_ms']:.2f} ms over `true`, served (median of {result['runs']})")
    return result

"""Measures 1-3: bake, s3tokenizer's own download loop and aria2c against a throttled mirror."""

from __future__ import annotations

import hashlib
import http.client
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.common import CHECKPOINT_MIRROR_PATH, MIB, BenchError, Profile, log, mirror_args
from bench.processes import mirror, run


def s3tokenizer_download(url: str, target: Path, expected_sha256: str) -> None:
    """s3tokenizer 0.3.0's ``_download`` without its tqdm bar: one urllib stream, 8 KiB reads, then hash.

    Raises RuntimeError on a hash mismatch, and whatever urllib raises when the stream breaks.
    """
    with urllib.request.urlopen(url) as source, open(target, "wb") as output:
        while True:
            buffer = source.read(8192)
            if not buffer:
                break
            output.write(buffer)
    model_bytes = open(target, "rb").read()  # noqa: SIM115 - as s3tokenizer does it
    if hashlib.sha256(model_bytes).hexdigest() != expected_sha256:
        raise RuntimeError(
            "Model has been downloaded but the SHA256 checksum does not not match. "
            "Please retry loading the model."
        )


@dataclass
class Fetcher:
    """The clients of measures 1-3, all against a mirror at ``url``."""

    src: Path
    work: Path
    logs: Path
    manifest: Path
    sha256: str
    size: int

    def bake(self, url: str, connections: int | None) -> float:
        """One cold `bake fetch` (fresh cache and destination); returns wall seconds."""
        run_dir = Path(tempfile.mkdtemp(prefix="bake-", dir=self.work))
        cmd = [sys.executable, "-m", "bake", "fetch", "--manifest", str(self.manifest)]
        cmd += ["--dest", str(run_dir / "dest"), "--cache-dir", str(run_dir / "cache"), "--no-origin", "-q"]
        for spec in mirror_args(url):
            cmd += ["--mirror", spec]
        if connections is not None:
            cmd += ["--connections", str(connections)]
        try:
            return run(cmd, log_path=self.logs / "fetch.log", cwd=self.src)
        finally:
            shutil.rmtree(run_dir)

    def baseline(self, url: str, *, rerun_on_error: bool = False) -> tuple[float, int]:
        """s3tokenizer's download, re-run from zero after a failure as users do; returns (seconds, runs)."""
        target = self.work / "baseline.onnx"
        runs = 0
        t0 = time.perf_counter()
        try:
            while True:
                runs += 1
                try:
                    s3tokenizer_download(f"{url}/{CHECKPOINT_MIRROR_PATH}", target, self.sha256)
                    return time.perf_counter() - t0, runs
                except (OSError, http.client.HTTPException) as exc:
                    if not rerun_on_error or runs >= 3:
                        raise BenchError(f"baseline download failed: {exc!r}") from exc
                    log(f"baseline: run {runs} broke ({type(exc).__name__}); re-running it from zero")
        finally:
            target.unlink(missing_ok=True)

    def aria2c(self, url: str, connections: int, *, checksum: bool) -> float:
        """aria2c at ``connections`` (``-x -s``, 1 MiB pieces, falloc like bake); returns wall seconds."""
        out = Path(tempfile.mkdtemp(prefix="aria2c-", dir=self.work))
        cmd = ["aria2c", "--no-conf", f"-x{connections}", f"-s{connections}", "-k1M"]
        cmd += ["--file-allocation=falloc", "--console-log-level=warn", "--summary-interval=0"]
        cmd += ["--download-result=hide", "-d", str(out), "-o", "file.bin"]
        if checksum:
            cmd.append(f"--checksum=sha-256={self.sha256}")
        cmd.append(f"{url}/{CHECKPOINT_MIRROR_PATH}")
        try:
            seconds = run(cmd, log_path=self.logs / "fetch.log", cwd=self.work)
            if not checksum and sha256_of(out / "file.bin") != self.sha256:  # outside the timing
                raise BenchError("aria2c delivered a file with the wrong sha256")
            return seconds
        finally:
            shutil.rmtree(out)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(4 * MIB):
            digest.update(block)
    return digest.hexdigest()


def median_of(runs: int, measure) -> float:
    return statistics.median(measure() for _ in range(runs))


def bench_fetch(profile: Profile, fetcher: Fetcher, root: Path, logs: Path) -> dict:
    """Measures 1-3."""
    results = _cold_fetch(profile, fetcher, root, logs)
    results["interrupted"] = _interrupted(profile, fetcher, root, logs)
    return results


def _cold_fetch(profile: Profile, fetcher: Fetcher, root: Path, logs: Path) -> dict:
    """Measures 1 and 3: each client in turn against the throttled mirror."""
    n, size = profile.connections, profile.size
    results: dict = {}
    with mirror(fetcher.src, root, logs, rate=profile.rate) as served:
        log(f"cold fetch: {size / MIB:.0f} MiB at {profile.rate / MIB:g} MiB/s per connection")
        bake_n = median_of(profile.repeats, lambda: fetcher.bake(served.url, n))
        log(f"  bake, {n} connections: {bake_n:.2f} s")
        aria = median_of(profile.repeats, lambda: fetcher.aria2c(served.url, n, checksum=True))
        log(f"  aria2c, {n} connections, --checksum: {aria:.2f} s")
        aria_raw = median_of(profile.repeats, lambda: fetcher.aria2c(served.url, n, checksum=False))
        log(f"  aria2c, {n} connections, no checksum: {aria_raw:.2f} s")
        bake_default = fetcher.bake(served.url, None)
        log(f"  bake, default connections: {bake_default:.2f} s")
        baseline, _ = fetcher.baseline(served.url)
        log(f"  baseline (s3tokenizer loop): {baseline:.2f} s")
    default_connections = _bake_default_connections(fetcher.src)
    limit = size / (n * profile.rate)
    results["cold_fetch"] = {
        "size_bytes": size,
        "rate_per_connection": profile.rate,
        "connections": n,
        "repeats": profile.repeats,
        "limit_seconds": limit,
        "bake_seconds": bake_n,
        "aria2c_seconds": aria,
        "aria2c_transfer_only_seconds": aria_raw,
        "baseline_seconds": baseline,
        "bake_default_seconds": bake_default,
        "bake_default_connections": default_connections,
        "bake_default_limit_seconds": size / (default_connections * profile.rate),
        "speedup_vs_baseline": baseline / bake_n,
        "bake_default_speedup_vs_baseline": baseline / bake_default,
        "vs_aria2c": aria / bake_n,
        "vs_aria2c_transfer_only": aria_raw / bake_n,
        "bake_vs_limit": limit / bake_n,
    }
    results["verify_overhead"] = {
        "bake_seconds": bake_n,
        "transfer_only": f"aria2c -x{n} -s{n} without --checksum",
        "transfer_only_seconds": aria_raw,
        "ratio": bake_n / aria_raw,
        "limit_seconds": limit,
        "bake_vs_limit_ratio": bake_n / limit,
    }
    return results


def _interrupted(profile: Profile, fetcher: Fetcher, root: Path, logs: Path) -> dict:
    """Measure 2: bake, then the baseline, against a mirror that cuts every connection once at 50 %."""
    n, size = profile.connections, profile.size
    log("interrupted transfer: every connection cut once at 50 %")
    with mirror(fetcher.src, root, logs, rate=profile.rate, drop_at=0.5) as served:
        bake_cut = fetcher.bake(served.url, n)
    bake_bytes = served.sent(CHECKPOINT_MIRROR_PATH)
    log(f"  bake: {bake_bytes / size:.3f} x the file in {bake_cut:.2f} s")
    with mirror(fetcher.src, root, logs, rate=profile.rate, drop_at=0.5) as served:
        base_cut, runs = fetcher.baseline(served.url, rerun_on_error=True)
    base_bytes = served.sent(CHECKPOINT_MIRROR_PATH)
    log(f"  baseline: {base_bytes / size:.3f} x the file in {base_cut:.2f} s ({runs} runs)")
    return {
        "bake_bytes": bake_bytes,
        "bake_ratio": bake_bytes / size,
        "bake_seconds": bake_cut,
        "baseline_bytes": base_bytes,
        "baseline_ratio": base_bytes / size,
        "baseline_seconds": base_cut,
        "baseline_runs": runs,
    }


def _bake_default_connections(src: Path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", "from bake.fetch import DEFAULT_CONNECTIONS as n; print(n)"],
        cwd=src, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(out)

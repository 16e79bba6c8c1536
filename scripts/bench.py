#!/usr/bin/env python3
"""Benchmark bake side by side with its peers, and the reuse of its asset layer.

    scripts/bench.py [--smoke] [--json OUT]        (as root; default OUT .work/bench.json)

One run measures, and prints as a table:
  1. cold fetch: a generated file from a loopback mirror throttled per connection,
     fetched by bake (8 connections, then its default), by a copy of s3tokenizer's
     own download loop (one urllib stream, 8 KiB reads, hash after) and by aria2c
     (8 connections), against the physical limit (connections x rate);
  2. interrupted transfer: the mirror cuts every connection once at 50 %; bytes
     the server sent / file size, for bake and for the baseline re-run from zero;
  3. verification overhead: bake / aria2c without a checksum, equal connections;
  4. warm rebuild, 5. base bump, 6. fresh builder: image builds in a second,
     throw-away dockerd (own data root, exec root, pid file and unix socket)
     pushing to a throw-away registry; mirror bytes, registry uploads, wall time;
  7. entrypoint: median of `bake-entrypoint true` against `true`.
Everything listens on 127.0.0.1 only, and every process it starts is stopped by pid.
The builds use a snapshot of this checkout (tracked and unignored files as they are
now), so edits made while it runs cannot reach them. --smoke is the same with a
small file and fewer runs, for CI: it prints the figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bake.manifest import manifest_digest, parse_manifest  # noqa: E402
from tests.assets import CHECKPOINT_MIRROR_PATH, MIRROR_PATHS, O200K_URL, mirror_args  # noqa: E402

MIB = 1 << 20
# The production checkpoint URL, which the mirror rewrites map onto CHECKPOINT_MIRROR_PATH.
CHECKPOINT_URL = next(
    prefix + CHECKPOINT_MIRROR_PATH.removeprefix(path)
    for prefix, path in MIRROR_PATHS.items()
    if CHECKPOINT_MIRROR_PATH.startswith(path)
)
ASSET_PATH = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"
BENCH_MANIFEST = "docker/bench-assets.toml"  # written into the snapshot only
BAKE_FILES = ["-f", "docker-bake.hcl", "-f", "docker/bake-test.hcl", "--allow=network.host"]
# vLLM's ROCm layout (the stand-in under docker/examples/vllm, run from its root) plus bake's overlay.
VLLM_ROOT = "docker/examples/vllm"
VLLM_FILES = [
    "-f",
    "docker/docker-bake-rocm.hcl",
    "-f",
    "docker/ci-rocm.hcl",
    "-f",
    "../../vllm/bake-rocm.hcl",
]
STANDINS = ("bookworm", "bookworm-slim")
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
)


@dataclass(frozen=True)
class Profile:
    """How big the run is."""

    name: str
    size: int
    rate: int  # bytes/s per connection, the mirror's throttle
    connections: int
    repeats: int  # runs of each fast client; the median counts
    entrypoint_runs: int


FULL = Profile("full", 512 * MIB, 4 * MIB, 8, 3, 200)
SMOKE = Profile("smoke", 16 * MIB, 8 * MIB, 8, 1, 20)


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and where its log is."""


# -- processes ------------------------------------------------------------------


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM the process we started, by its pid; SIGKILL it if it outlives ``timeout``."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, what: str, proc: subprocess.Popen, log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise BenchError(f"{what} exited during start-up (exit {proc.returncode}); see {log_path}")
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not come up within {timeout:g} s; see {log_path}")
        time.sleep(0.1)


def run(cmd: Sequence[str], *, log_path: Path, cwd: Path, env: dict[str, str] | None = None) -> float:
    """Run ``cmd`` with its output in ``log_path``; return its wall seconds. Raises BenchError on failure."""
    with open(log_path, "ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise BenchError(
            f"`{' '.join(cmd[:6])} …` exited {proc.returncode}; end of {log_path}:\n" + "\n".join(tail)
        )
    return seconds


@dataclass
class Served:
    """A running mirror; ``bytes_sent`` (server-side, per path) is filled in when it stops."""

    url: str = ""
    bytes_sent: dict[str, int] = field(default_factory=dict)

    def sent(self, path: str) -> int:
        return self.bytes_sent.get("/" + path, 0)


@contextlib.contextmanager
def mirror(
    src: Path, root: Path, logs: Path, *, port: int = 0, rate: int | None = None, drop_at: float | None = None
) -> Iterator[Served]:
    """Run ``python -m tests.mirror`` (the snapshot's) over ``root`` until the block ends."""
    state = Path(tempfile.mkdtemp(prefix="mirror-", dir=logs))
    cmd = [sys.executable, "-m", "tests.mirror", "--root", str(root), "--port", str(port)]
    cmd += ["--port-file", str(state / "port"), "--stats-file", str(state / "stats.json")]
    if rate:
        cmd += ["--rate", str(rate)]
    if drop_at is not None:
        cmd += ["--drop-at", str(drop_at)]
    served = Served()
    log_path = state / "mirror.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: (state / "port").is_file(), "the mirror", proc, log_path)
        served.url = f"http://127.0.0.1:{(state / 'port').read_text().strip()}"
        yield served
    finally:
        stop(proc)
        stats = state / "stats.json"
        if stats.is_file():
            served.bytes_sent = json.loads(stats.read_text())["bytes_sent"]


# -- the file and the snapshot ----------------------------------------------------


def generate(path: Path, size: int) -> str:
    """Write ``size`` incompressible bytes (a fixed seed) to ``path``; return their sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0xBA4E)
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        left = size
        while left:
            block = rng.randbytes(min(left, 8 * MIB))
            digest.update(block)
            out.write(block)
            left -= len(block)
    return digest.hexdigest()


def bench_manifest(sha256: str, size: int) -> str:
    return (
        "# Written by scripts/bench.py into its snapshot: the generated checkpoint.\n"
        "[[asset]]\n"
        'name = "speech_tokenizer_v3_25hz"\n'
        f'path = "{ASSET_PATH}"\n'
        f'sha256 = "{sha256}"\n'
        f"size = {size}\n"
        f'urls = ["{CHECKPOINT_URL}"]\n'
    )


def snapshot(dest: Path, manifest_text: str) -> Path:
    """Copy this checkout's tracked and unignored files to ``dest``, add the bench manifest, commit it all."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in sorted(set(filter(None, listing.split("\0")))):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    (dest / BENCH_MANIFEST).write_text(manifest_text)
    identity = {
        f"GIT_{r}_{k}": v
        for r in ("AUTHOR", "COMMITTER")
        for k, v in (("NAME", "bench"), ("EMAIL", "bench@bake.invalid"))
    }
    env = {**os.environ, **identity, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench snapshot"]):
        subprocess.run(["git", *cmd], cwd=dest, env=env, check=True, capture_output=True)
    return dest


# -- fetch clients ----------------------------------------------------------------


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

    log("interrupted transfer: every connection cut once at 50 %")
    with mirror(fetcher.src, root, logs, rate=profile.rate, drop_at=0.5) as served:
        bake_cut = fetcher.bake(served.url, n)
    bake_bytes = served.sent(CHECKPOINT_MIRROR_PATH)
    log(f"  bake: {bake_bytes / size:.3f} x the file in {bake_cut:.2f} s")
    with mirror(fetcher.src, root, logs, rate=profile.rate, drop_at=0.5) as served:
        base_cut, runs = fetcher.baseline(served.url, rerun_on_error=True)
    base_bytes = served.sent(CHECKPOINT_MIRROR_PATH)
    log(f"  baseline: {base_bytes / size:.3f} x the file in {base_cut:.2f} s ({runs} runs)")
    results["interrupted"] = {
        "bake_bytes": bake_bytes,
        "bake_ratio": bake_bytes / size,
        "bake_seconds": bake_cut,
        "baseline_bytes": base_bytes,
        "baseline_ratio": base_bytes / size,
        "baseline_seconds": base_cut,
        "baseline_runs": runs,
    }
    return results


def _bake_default_connections(src: Path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", "from bake.fetch import DEFAULT_CONNECTIONS as n; print(n)"],
        cwd=src, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(out)


# -- builds: a throw-away engine and registry ---------------------------------------


class Engine:
    """A second dockerd with its own data root, exec root, pid file and unix socket; no TCP, no bridge."""

    def __init__(self, work: Path, logs: Path) -> None:
        self.work = work
        self.logs = logs
        self.sock = work / "docker.sock"
        self.proc: subprocess.Popen | None = None
        config = work / "docker-config"
        config.mkdir(parents=True)
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.sock}", "DOCKER_CONFIG": str(config)}

    def start(self) -> None:
        daemon = self.work / "dockerd.json"
        daemon.write_text(json.dumps({"builder": {"entitlements": {"network-host": True}}}))
        dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        if dockerd is None:
            raise BenchError("dockerd not found; run scripts/toolchain.sh up as root")
        cmd = [dockerd, "--data-root", str(self.work / "data"), "--exec-root", str(self.work / "exec")]
        cmd += ["--pidfile", str(self.work / "dockerd.pid"), "--host", f"unix://{self.sock}"]
        cmd += ["--bridge=none", "--iptables=false", "--ip6tables=false", "--config-file", str(daemon)]
        # Own namespaces too, in case both daemons ever share a system containerd.
        cmd += [
            "--containerd-namespace",
            "bake-bench",
            "--containerd-plugins-namespace",
            "bake-bench-plugins",
        ]
        log_path = self.logs / "dockerd.log"
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self.answers, "the bench dockerd", self.proc, log_path)

    def answers(self) -> bool:
        return self.docker("info", check=False).returncode == 0

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None

    def wipe(self) -> None:
        """Stop, delete every image, layer and build cache entry (the whole data root), start afresh."""
        self.stop()
        shutil.rmtree(self.work / "data")
        shutil.rmtree(self.work / "exec", ignore_errors=True)
        self.start()

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise BenchError(f"docker {' '.join(args[:4])} … exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def inspect(self, ref: str) -> dict:
        return json.loads(self.docker("image", "inspect", ref).stdout)[0]

    def layers(self, ref: str) -> list[str]:
        return self.inspect(ref)["RootFS"]["Layers"]


class Registry:
    """Debian's docker-registry on a free loopback port; it outlives the engine wipe."""

    def __init__(self, work: Path, logs: Path) -> None:
        self.root = work / "registry"
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.logs = logs
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        config = self.root.with_suffix(".yml")
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root}\nhttp:\n  addr: {self.host}\n"
        )
        log_path = self.logs / "registry.log"
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(
                ["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        wait_until(self.answers, "the bench registry", self.proc, log_path)

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None

    def blobs(self) -> dict[str, int]:
        """Every blob the registry stores: digest -> bytes."""
        base = self.root / "docker/registry/v2/blobs/sha256"
        return {f"sha256:{p.parent.name}": p.stat().st_size for p in base.glob("*/*/data")}

    def manifest(self, repo: str, tag: str) -> dict:
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{tag}",
            headers={"Accept": MANIFEST_TYPES},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)


@dataclass
class Push:
    """One `docker push`: what the asset layer did, and what the registry newly stored."""

    asset_layer_status: str
    asset_layer_bytes_uploaded: int
    asset_layer_compressed_bytes: int
    new_blob_bytes: int
    seconds: float


class Builds:
    """Measures 4-6 and the fleet check, in order, on one engine and one registry."""

    def __init__(
        self,
        profile: Profile,
        src: Path,
        root: Path,
        logs: Path,
        engine: Engine,
        registry: Registry,
        digest: str,
        standin_registry: str,
    ) -> None:
        self.profile = profile
        self.src = src
        self.root = root
        self.logs = logs
        self.engine = engine
        self.registry = registry
        self.digest = digest
        self.standin_registry = standin_registry
        self.mirror_port = free_port()  # one URL for every build: it is a build arg of the fetch stage
        self.image_repo = f"{registry.host}/bake-bench"
        self.assets_repo = f"{registry.host}/bake-assets"
        self.fleet_repo = f"{registry.host}/vllm-bench"

    def env(self, **extra: str) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.mirror_port}"
        return {
            **self.engine.env,
            "ASSET_MANIFEST": BENCH_MANIFEST,
            "ASSET_MIRRORS": " ".join(mirror_args(url)),
            "ASSET_DIGEST": self.digest,
            "BAKE_FETCH_ARGS": f"--no-origin --connections {self.profile.connections}",
            "BAKE_TEST_HF_TOKEN": "hf_bench_dummy_token",
            "IMAGE_NAME": self.image_repo,
            "IMAGE_TAG": "bookworm",
            **extra,
        }

    def pull_standins(self) -> None:
        for tag in STANDINS:
            remote = f"{self.standin_registry}/rocm-standin:{tag}"
            self.engine.docker("pull", "-q", remote)
            self.engine.docker("tag", remote, f"local/rocm-standin:{tag}")

    def bake(self, phase: str, cmd: Sequence[str], env: dict[str, str], cwd: str = ".") -> tuple[float, int]:
        """Run a build with the origin mirror up; return (wall seconds, asset bytes the mirror served)."""
        with mirror(self.src, self.root, self.logs, port=self.mirror_port, rate=self.profile.rate) as served:
            seconds = run(cmd, log_path=self.logs / f"{phase}.log", cwd=self.src / cwd, env=env)
        sent = served.sent(CHECKPOINT_MIRROR_PATH)
        log(f"  {phase}: {seconds:.1f} s, {sent} asset bytes from the mirror")
        return seconds, sent

    def push(self, phase: str, ref: str, asset_layer: str) -> Push:
        """`docker push` ``ref``; read the asset layer's fate from its output and the registry's store."""
        before = self.registry.blobs()
        t0 = time.perf_counter()
        proc = self.engine.docker("push", ref)
        seconds = time.perf_counter() - t0
        (self.logs / f"{phase}.log").write_text(proc.stdout + proc.stderr)
        short = asset_layer.removeprefix("sha256:")[:12]
        # One line per layer state (Preparing, Waiting, ...); the last one is the outcome.
        states = [
            line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith(f"{short}: ")
        ]
        status = states[-1] if states else ""
        repo, tag = ref.rsplit(":", 1)
        index = self.engine.layers(ref).index(asset_layer)
        layer = self.registry.manifest(repo.split("/", 1)[1], tag)["layers"][index]
        new = {d: n for d, n in self.registry.blobs().items() if d not in before}
        uploaded = layer["size"] if status == "Pushed" else 0
        if status not in ("Pushed", "Layer already exists") and not status.startswith("Mounted from"):
            raise BenchError(
                f"docker push {ref}: no status line for the asset layer {short}; see {self.logs / phase}.log"
            )
        stored = sum(new.values())
        log(f"  {phase}: asset layer {status!r}, {uploaded} bytes uploaded; {stored} new blob bytes")
        return Push(status, uploaded, layer["size"], stored, seconds)

    def asset_layer(self, ref: str, base: str) -> str:
        """The first layer of ``ref`` its base lacks; the base's layers must come first, unchanged."""
        layers, base_layers = self.engine.layers(ref), self.engine.layers(base)
        if layers[: len(base_layers)] != base_layers:
            raise BenchError(f"{ref} does not start with the layers of {base}")
        return layers[len(base_layers)]

    def run_all(self) -> dict:
        base_a, base_b = (f"local/rocm-standin:{tag}" for tag in STANDINS)
        plain = ["docker", "buildx", "bake", *BAKE_FILES, "--progress=plain", "image"]
        build = [sys.executable, "-m", "bake", "build", "--assets-image", self.assets_repo]
        via_assets_image = [*build, "--", *BAKE_FILES, "--progress=plain", "image"]
        image_a, image_b = f"{self.image_repo}:bookworm", f"{self.image_repo}:bookworm-slim"
        assets_ref = f"{self.assets_repo}:{self.digest}"

        log("builds: warm rebuild")
        cold_s, cold_bytes = self.bake("cold-build", plain, self.env())
        layer = self.asset_layer(image_a, base_a)
        warm_s, warm_bytes = self.bake("warm-build", plain, self.env())
        warm = {
            "cold_seconds": cold_s,
            "cold_asset_bytes": cold_bytes,
            "warm_seconds": warm_s,
            "warm_asset_bytes": warm_bytes,
            "warm_vs_cold": warm_s / cold_s,
            "same_asset_layer": self.asset_layer(image_a, base_a) == layer,
        }

        log("builds: base bump")
        first = self.push("push-first-base", image_a, layer)
        bump_s, bump_bytes = self.bake(
            "base-bump-build", plain, self.env(BASE_IMAGE=base_b, IMAGE_TAG="bookworm-slim")
        )
        bumped = self.push("push-base-bump", image_b, self.asset_layer(image_b, base_b))
        base_bump = {
            "first_push_asset_layer_status": first.asset_layer_status,
            "first_push_asset_layer_bytes": first.asset_layer_bytes_uploaded,
            "build_seconds": bump_s,
            "build_asset_bytes_from_mirror": bump_bytes,
            "push_seconds": bumped.seconds,
            "asset_layer_status": bumped.asset_layer_status,
            "asset_layer_bytes_uploaded": bumped.asset_layer_bytes_uploaded,
            "asset_layer_compressed_bytes": bumped.asset_layer_compressed_bytes,
            "new_blob_bytes": bumped.new_blob_bytes,
            "same_asset_layer": self.asset_layer(image_b, base_b) == layer,
        }

        log("builds: publish the assets image, and a vLLM-style image from it through a -f overlay")
        before = self.registry.blobs()
        publish_s, publish_bytes = self.bake("publish-assets-image", via_assets_image, self.env())
        publish_new = sum(n for d, n in self.registry.blobs().items() if d not in before)
        pulled = sum(blob["size"] for blob in self.registry.manifest("bake-assets", self.digest)["layers"])
        runtime_ref = f"{self.registry.host}/bake-runtime:bench"
        runtime = [*plain[:-1], "--set", f"runtime.tags={runtime_ref}", "--push", "runtime"]
        self.bake("publish-runtime-image", runtime, self.env())
        fleet_ref = f"{self.fleet_repo}:ci_base"
        fleet_env = self.env(
            BAKE_ASSETS_REPO=self.assets_repo,
            BAKE_ASSETS_DIGEST=self.digest,
            BAKE_RUNTIME_IMAGE=runtime_ref,
            BASE_IMAGE=base_b,
        )
        fleet_s, fleet_bytes = self.bake(
            "fleet-build",
            ["docker", "buildx", "bake", *VLLM_FILES, "--progress=plain",
             "--set", f"ci-base-rocm.tags={fleet_ref}", "ci-base-rocm"],
            fleet_env,
            cwd=VLLM_ROOT,
        )  # fmt: skip
        fleet_same = layer in self.engine.layers(fleet_ref)
        if not fleet_same:
            raise BenchError(f"{fleet_ref}: the vLLM stand-in's ci_base lacks the asset layer {layer}")
        fleet_push = self.push("push-fleet", fleet_ref, layer)

        log("builds: fresh builder (engine data root deleted; the registry stays)")
        self.engine.wipe()
        self.pull_standins()
        fresh_s, fresh_bytes = self.bake("fresh-builder-build", via_assets_image, self.env())
        fresh = {
            "assets_image": assets_ref,
            "publish_seconds": publish_s,
            "publish_asset_bytes_from_mirror": publish_bytes,
            "publish_new_blob_bytes": publish_new,
            "seconds": fresh_s,
            "origin_asset_bytes": fresh_bytes,
            "registry_asset_bytes": pulled,
            "vs_cold": fresh_s / cold_s,
            "same_asset_layer": self.asset_layer(image_a, base_a) == layer,
            "fleet": {
                "bake_files": " ".join(f"{VLLM_ROOT}/{f}" for f in VLLM_FILES[1::2]),
                "seconds": fleet_s,
                "asset_bytes_from_mirror": fleet_bytes,
                "same_asset_layer": fleet_same,
                "push_asset_layer_status": fleet_push.asset_layer_status,
                "push_asset_layer_bytes_uploaded": fleet_push.asset_layer_bytes_uploaded,
            },
        }
        return {"warm_rebuild": warm, "base_bump": base_bump, "fresh_builder": fresh}


def bench_builds(
    profile: Profile, src: Path, root: Path, work: Path, logs: Path, digest: str, standin_registry: str
) -> dict:
    """Measures 4-6, with their engine and registry started and stopped here."""
    engine = Engine(work / "engine", logs)
    registry = Registry(work, logs)
    with contextlib.ExitStack() as stack:
        registry.start()
        stack.callback(registry.stop)
        stack.callback(engine.stop)
        engine.start()
        builds = Builds(profile, src, root, logs, engine, registry, digest, standin_registry)
        builds.pull_standins()
        return builds.run_all()


# -- entrypoint -----------------------------------------------------------------------


def bench_entrypoint(profile: Profile, src: Path, work: Path) -> dict:
    """Measure 7: median wall time of `bake-entrypoint true` and of `true`, runs interleaved."""
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
    entrypoint = [str(src / "scripts/entrypoint.sh"), "true"]
    true = [shutil.which("true") or "/bin/true"]
    run(entrypoint, log_path=log_path, cwd=ep, env=env)  # makes the links; every timed run finds them made

    def once(cmd: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=ep, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return (time.perf_counter() - t0) * 1000

    with_ep, bare = [], []
    for _ in range(profile.entrypoint_runs):
        with_ep.append(once(entrypoint))
        bare.append(once(true))
    result = {
        "runs": profile.entrypoint_runs,
        "shell": os.path.realpath("/bin/sh"),
        "median_ms_entrypoint_true": statistics.median(with_ep),
        "median_ms_true": statistics.median(bare),
    }
    result["overhead_ms"] = result["median_ms_entrypoint_true"] - result["median_ms_true"]
    log(f"entrypoint: {result['overhead_ms']:.2f} ms over `true` (median of {profile.entrypoint_runs})")
    return result


# -- report --------------------------------------------------------------------------------


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )

    def version(*cmd: str) -> str:
        exe = shutil.which(cmd[0], path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        proc = subprocess.run([exe or cmd[0], *cmd[1:]], capture_output=True, text=True, check=False)
        return (
            proc.stdout.strip().splitlines()[0]
            if proc.returncode == 0 and proc.stdout.strip()
            else "unavailable"
        )

    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kib / (1 << 20), 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "engine": version("dockerd", "--version"),
        "buildx": version("docker", "buildx", "version"),
        "aria2c": version("aria2c", "--version"),
    }


def verdicts(m: dict) -> list[dict]:
    """One row per measure: what was seen, the target, and whether it was met."""
    cold, cut, ver = m["cold_fetch"], m["interrupted"], m["verify_overhead"]
    warm, bump, fresh, ep = m["warm_rebuild"], m["base_bump"], m["fresh_builder"], m["entrypoint"]
    fleet = fresh["fleet"]
    n, rate, mib = cold["connections"], cold["rate_per_connection"] / MIB, cold["size_bytes"] / MIB
    speedup, vs_aria, vs_raw = cold["speedup_vs_baseline"], cold["vs_aria2c"], cold["vs_aria2c_transfer_only"]
    rows = [
        (
            "1. cold fetch",
            f"{mib:.0f} MiB, {rate:g} MiB/s per connection; limit {n} x {rate:g} MiB/s: "
            f"{cold['limit_seconds']:.1f} s. bake ({n} conn) {cold['bake_seconds']:.2f} s; aria2c ({n} conn) "
            f"{cold['aria2c_seconds']:.2f} s with --checksum, {cold['aria2c_transfer_only_seconds']:.2f} s "
            f"without; baseline {cold['baseline_seconds']:.1f} s; bake default "
            f"({cold['bake_default_connections']} conn) {cold['bake_default_seconds']:.1f} s. "
            f"bake = {speedup:.2f}x baseline, {vs_aria:.3f}x / {vs_raw:.3f}x aria2c (with / without "
            f"checksum), {cold['bake_vs_limit']:.3f}x the limit",
            ">= 6x baseline, >= 0.95x aria2c",
            speedup >= 6 and min(vs_aria, vs_raw) >= 0.95,
        ),
        (
            "2. interrupted transfer",
            f"bytes sent / file size: bake {cut['bake_ratio']:.3f} ({cut['bake_seconds']:.1f} s); baseline "
            f"{cut['baseline_ratio']:.3f} ({cut['baseline_runs']} runs, {cut['baseline_seconds']:.1f} s)",
            "<= 1.1",
            cut["bake_ratio"] <= 1.1,
        ),
        (
            "3. verification overhead",
            f"bake {ver['bake_seconds']:.2f} s / {ver['transfer_only']} "
            f"{ver['transfer_only_seconds']:.2f} s = {ver['ratio']:.3f}",
            "<= 1.10",
            ver["ratio"] <= 1.10,
        ),
        (
            "4. warm rebuild",
            f"{warm['warm_asset_bytes']} asset bytes from the mirror (cold: "
            f"{warm['cold_asset_bytes'] / MIB:.0f} MiB); {warm['warm_seconds']:.1f} s vs "
            f"{warm['cold_seconds']:.1f} s cold",
            "0 asset bytes",
            warm["warm_asset_bytes"] == 0,
        ),
        (
            "5. base bump",
            f"asset layer: {bump['asset_layer_bytes_uploaded']} bytes uploaded "
            f"({bump['asset_layer_status']}; first push uploaded "
            f"{bump['first_push_asset_layer_bytes'] / MIB:.0f} MiB), {bump['build_asset_bytes_from_mirror']} "
            f"bytes from the mirror, same diff-ID: {bump['same_asset_layer']}",
            "0 asset bytes",
            bump["asset_layer_bytes_uploaded"] == 0,
        ),
        (
            "6. fresh builder",
            f"{fresh['origin_asset_bytes']} asset bytes from the origin mirror (the assets image, "
            f"{fresh['registry_asset_bytes'] / MIB:.0f} MiB, came from the registry); "
            f"{fresh['seconds']:.1f} s vs "
            f"{warm['cold_seconds']:.1f} s cold; same diff-ID: {fresh['same_asset_layer']}. vLLM-style image "
            f"(-f overlay): same diff-ID {fleet['same_asset_layer']}, its push uploaded "
            f"{fleet['push_asset_layer_bytes_uploaded']} asset bytes ({fleet['push_asset_layer_status']})",
            "0 asset bytes",
            fresh["origin_asset_bytes"] == 0,
        ),
        (
            "7. entrypoint",
            f"{ep['overhead_ms']:.2f} ms: median of {ep['runs']}, {ep['median_ms_entrypoint_true']:.2f} ms "
            f"`bake-entrypoint true` vs {ep['median_ms_true']:.2f} ms `true` ({ep['shell']})",
            "<= 10 ms",
            ep["overhead_ms"] <= 10,
        ),
    ]
    return [{"measure": a, "result": b, "target": c, "met": d} for a, b, c, d in rows]


def table(report: dict) -> str:
    """The results as a markdown table, the machine on the line above."""
    mach = report["machine"]
    lines = [
        f"Machine: {mach['nproc']} CPUs ({mach['cpu']}), {mach['memory_gib']} GiB RAM, "
        f"Linux {mach['kernel']}, Python {mach['python']}; {mach['engine']}; {mach['buildx']}; "
        f"{mach['aria2c']}. Profile {report['profile']}: {report['seconds']:.0f} s in all.",
        "",
        "| measure | result | target | met |",
        "|---|---|---|---|",
    ]
    for row in report["targets"]:
        lines.append(
            f"| {row['measure']} | {row['result']} | {row['target']} | {'yes' if row['met'] else 'NO'} |"
        )
    if report["profile"] == SMOKE.name:
        limit = report["measures"]["cold_fetch"]["limit_seconds"]
        lines += [
            "",
            f"Smoke profile: against a {limit:.2f} s transfer, process start-up decides the timing ratios; "
            "the timing targets are judged on the full run (scripts/bench.py).",
        ]
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------


def toolchain() -> tuple[str, bool]:
    """Make sure the engine, buildx, registry and stand-ins are ready; return (registry, started here)."""
    script = REPO / "scripts/toolchain.sh"
    started = False
    if subprocess.run([str(script), "status"], capture_output=True, check=False).returncode != 0:
        log("toolchain not ready; running scripts/toolchain.sh up")
        subprocess.run([str(script), "up"], check=True)
        started = True
    env_lines = subprocess.run([str(script), "env"], capture_output=True, text=True, check=True).stdout
    values = dict(
        line.removeprefix("export ").split("=", 1) for line in env_lines.splitlines() if "=" in line
    )
    return values["BAKE_REGISTRY"], started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small file and fewer runs (about two minutes)")
    parser.add_argument("--json", type=Path, default=REPO / ".work/bench.json", help="write the results here")
    args = parser.parse_args(argv)
    profile = SMOKE if args.smoke else FULL
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so every daemon is stopped
    for var in PROXY_VARS:  # loopback only: no client may route through a proxy
        os.environ.pop(var, None)
        os.environ.pop(var.upper(), None)
    t0 = time.perf_counter()
    standin_registry, toolchain_started = toolchain()
    work = Path(tempfile.mkdtemp(prefix="bake-bench-"))
    logs = work / "logs"
    logs.mkdir()
    log(f"profile {profile.name}; work directory {work}")
    try:
        root = work / "mirror"
        log(f"generating {profile.size / MIB:.0f} MiB")
        sha256 = generate(root / CHECKPOINT_MIRROR_PATH, profile.size)
        text = bench_manifest(sha256, profile.size)
        digest = manifest_digest(parse_manifest(text))
        src = snapshot(work / "src", text)
        fetcher = Fetcher(src, work, logs, src / BENCH_MANIFEST, sha256, profile.size)
        measures = bench_fetch(profile, fetcher, root, logs)
        measures.update(bench_builds(profile, src, root, work, logs, digest, standin_registry))
        measures["entrypoint"] = bench_entrypoint(profile, src, work)
    except BaseException:
        for entry in work.iterdir():  # the generated file and engine data are large; the logs explain
            if entry == logs:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        log(f"failed; logs kept in {logs}")
        raise
    else:
        shutil.rmtree(work)
    finally:
        if toolchain_started and os.environ.get("BAKE_KEEP_TOOLCHAIN") != "1":
            subprocess.run([str(REPO / "scripts/toolchain.sh"), "down"], check=False)
    report = {
        "profile": profile.name,
        "command": "scripts/bench.py" + (" --smoke" if args.smoke else ""),
        "machine": machine(),
        "file": {"size_bytes": profile.size, "sha256": sha256, "manifest_digest": digest},
        "measures": measures,
        "seconds": time.perf_counter() - t0,
    }
    report["targets"] = verdicts(measures)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None

"""What every part of the bench shares: paths, names, the run profiles, the log and the error."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bake.manifest import load_manifest

REPO = Path(__file__).resolve().parents[2]

MIB = 1 << 20
ASSET_PATH = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"
# The bench's files stand in for production ones, at their production URLs (docker/assets.toml's).
_PRODUCTION = {a.name: a.urls[0] for a in load_manifest(REPO / "docker/assets.toml")}
CHECKPOINT_URL = _PRODUCTION["speech_tokenizer_v3_25hz"]
O200K_URL = _PRODUCTION["o200k_base"]
_CHECKPOINT_HOST = urlsplit(CHECKPOINT_URL).netloc
# Where a mirror root holds the checkpoint: its host, then its path.
CHECKPOINT_MIRROR_PATH = _CHECKPOINT_HOST + urlsplit(CHECKPOINT_URL).path


def mirror_args(base_url: str) -> list[str]:
    """The ``PREFIX=REPLACEMENT`` rewrite that points the checkpoint's host at a mirror root URL."""
    return [f"https://{_CHECKPOINT_HOST}/={base_url.rstrip('/')}/{_CHECKPOINT_HOST}/"]


BENCH_MANIFEST = "docker/bench-assets.toml"  # written into the snapshot only
BAKE_FILES = ["-f", "docker-bake.hcl", "-f", "docker/bake-test.hcl", "--allow=network.host"]
# vLLM's ROCm CI (the stand-in, with its own wrapper; bake's layer pinned by digest).
VLLM_ROOT = "docker/examples/vllm"
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
    scale_counts: tuple[int, ...]  # file counts measure 9 serves


FULL = Profile("full", 512 * MIB, 4 * MIB, 8, 3, 200, (10, 1000, 10000))
SMOKE = Profile("smoke", 16 * MIB, 8 * MIB, 8, 1, 20, (10, 100))


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and where its log is."""

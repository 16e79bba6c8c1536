"""The throw-away second dockerd and registry the build measures run on."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import docker

from bake import layers, registry
from bench.common import MANIFEST_TYPES, REPO, BenchError
from bench.processes import free_port, stop, wait_until


class Engine:
    """A second dockerd with its own data root, exec root, pid file and unix socket; no TCP, no bridge."""

    def __init__(self, work: Path, logs: Path, namespace: str = "bake-bench") -> None:
        self.work = work
        self.logs = logs
        self.namespace = namespace
        self.sock = work / "docker.sock"
        self.proc: subprocess.Popen | None = None
        self.features: dict | None = None
        config = work / "docker-config"
        config.mkdir(parents=True)
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.sock}", "DOCKER_CONFIG": str(config)}

    def start(self, features: dict | None = None) -> None:
        """Start it; ``features`` (such as ``containerd-snapshotter``) join the toolchain's settings."""
        # The settings of the toolchain's engine (no bridge, no iptables, network-host), from one file.
        daemon = REPO / "scripts/dockerd.json"
        if features is not None:
            self.features = features
        if self.features:
            merged = self.work / "dockerd.json"
            merged.write_text(json.dumps({**json.loads(daemon.read_text()), "features": self.features}))
            daemon = merged
        dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        if dockerd is None:
            raise BenchError("dockerd not found; run scripts/toolchain.sh up as root")
        cmd = [dockerd, "--data-root", str(self.work / "data"), "--exec-root", str(self.work / "exec")]
        cmd += ["--pidfile", str(self.work / "dockerd.pid"), "--host", f"unix://{self.sock}"]
        cmd += ["--config-file", str(daemon)]
        # Own namespaces too, in case both daemons ever share a system containerd.
        cmd += [
            "--containerd-namespace",
            self.namespace,
            "--containerd-plugins-namespace",
            f"{self.namespace}-plugins",
        ]
        log_path = self.logs / "dockerd.log"
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self.answers, "the bench dockerd", self.proc, log_path)

    @functools.cached_property
    def client(self) -> docker.DockerClient:
        """The docker SDK for everything but buildx (which it lacks): typed errors, no CLI text.

        Made on first use: the client asks the engine for its API version as it is made.
        """
        return docker.DockerClient(base_url=f"unix://{self.sock}", timeout=900)

    def answers(self) -> bool:
        try:
            return self.client.ping()
        # A restarting engine has no socket yet: requests' ConnectionError, an OSError.
        except (docker.errors.DockerException, OSError):
            return False

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

    def inspect(self, ref: str) -> dict:
        return self.client.images.get(ref).attrs

    def push(self, ref: str) -> list[dict]:
        """Push ``ref``; return the registry's progress records. Raises BenchError on an error record."""
        repository, tag = ref.rsplit(":", 1)
        records = list(self.client.images.push(repository, tag, stream=True, decode=True))
        if failed := [r["error"] for r in records if "error" in r]:
            raise BenchError(f"docker push {ref}: {failed[-1]}")
        return records

    def layers(self, ref: str) -> list[str]:
        return self.inspect(ref)["RootFS"]["Layers"]


_GET_BLOB = re.compile(
    r'msg="response completed".*http\.request\.method=GET .*http\.request\.uri="/v2/\S+/blobs/'
    r'(?P<digest>sha256:[0-9a-f]{64})".*http\.response\.written=(?P<bytes>\d+)'
)


class Registry:
    """Debian's docker-registry on a free loopback port; it outlives the engine wipe."""

    def __init__(self, work: Path, logs: Path, level: str = "warn") -> None:
        self.root = work / "registry"
        self.level = level  # "info" logs every request, with the bytes it wrote
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.logs = logs
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        config = self.root.with_suffix(".yml")
        config.write_text(
            f"version: 0.1\nlog:\n  level: {self.level}\n"
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

    def log_size(self) -> int:
        """Where the log ends now: a mark for ``blob_gets``."""
        return (self.logs / "registry.log").stat().st_size

    def blob_gets(self, since: int) -> dict[str, int]:
        """The bytes the registry wrote for each blob GET since the mark ``since`` (level "info" only)."""
        with (self.logs / "registry.log").open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        found: dict[str, int] = {}
        for m in _GET_BLOB.finditer(text):
            found[m["digest"]] = found.get(m["digest"], 0) + int(m["bytes"])
        return found

    def layer_sizes(self, ref: str) -> dict[str, int]:
        """Blob digest -> size of each layer of ``ref`` (``host/name@digest``)."""
        name, _, digest = ref.split("/", 1)[1].partition("@")
        return {layer["digest"]: layer["size"] for layer in self.manifest(name, digest)["layers"]}

    def blobs(self) -> dict[str, int]:
        """Every blob the registry stores: digest -> bytes."""
        base = self.root / "docker/registry/v2/blobs/sha256"
        return {f"sha256:{p.parent.name}": p.stat().st_size for p in base.glob("*/*/data")}

    def push_unit(self, name: str, tag: str, layer: layers.Layer) -> str:
        """Push ``layer`` as a one-layer image ``name:tag``, as bake publishes a unit; its manifest digest."""
        return self.push_image(name, tag, [layer])

    def push_image(self, name: str, tag: str, blobs: list[layers.Layer]) -> str:
        """Push a ``FROM scratch`` image of ``blobs`` as ``name:tag``, as bake writes one; its digest."""
        target = registry.Registry(f"{self.host}/{name}")
        config, manifest = layers.image(blobs)
        for layer in blobs:
            target.push_blob(layer.digest, path=layer.path)
        target.push_blob(f"sha256:{hashlib.sha256(config).hexdigest()}", data=config)
        return target.put_manifest(tag, manifest, layers.MANIFEST_TYPE)

    def manifest(self, repo: str, tag: str) -> dict:
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{tag}",
            headers={"Accept": MANIFEST_TYPES},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)


def agent_pulls(registry: Registry, work: Path, logs: Path, label: str, versions: list[dict]) -> dict:
    """Per image store, an empty engine pulls each of ``versions`` in turn (each a dict with its ``ref``,
    ``host/name@digest``, its ``block_layers`` (diff ID, blob) and every layer's ``sizes``); return, per
    store, one row per pull: the registry's bytes for it (its log), those of the block's blobs, the
    bytes of the block's layers that changed since the version before, and the ratio of the two.
    ``label`` names the agents' directories: keep it short, containerd's sockets hold 104 bytes of path."""
    found = {}
    for store in ("classic", "containerd"):
        agent = Engine(work / f"agent-{store}-{label}", logs, namespace=f"bake-bench-{store}")
        agent.start(features={"containerd-snapshotter": store == "containerd"})
        try:
            rows = []
            for before, version in zip([None, *versions], versions, strict=False):
                mark = registry.log_size()
                repo, digest = version["ref"].split("@")
                agent.client.images.pull(repo, tag=digest)
                pulled = registry.blob_gets(since=mark)
                block = {blob for _, blob in version["block_layers"]}
                changed = block - {blob for _, blob in before["block_layers"]} if before else block
                expected = sum(version["sizes"][blob] for blob in changed)
                rows.append({
                    "bytes": sum(pulled.values()),
                    "asset_bytes": sum(n for blob, n in pulled.items() if blob in block),
                    "changed_block_bytes": expected,
                    "ratio": sum(pulled.values()) / expected if expected else None,
                })  # fmt: skip
            found[store] = rows
        finally:
            agent.stop()
            shutil.rmtree(work / f"agent-{store}-{label}", ignore_errors=True)
    return found

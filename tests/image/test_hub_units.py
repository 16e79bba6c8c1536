"""Hub files as units of their own, end to end: a bump moves only what changed, a shared file moves once.

A loopback Hub (tests/hub_server.py) holds a model (a tokenizer trained here, its config, and an LFS
weights file) and a fork that shares the weights. `bake add` pins both under ``[units]
hub_file_threshold`` below the weights' size, so the weights are one unit of their own, for both
repositories. bake publishes the units and its runtime into a registry of this test's own, whose log
records the bytes of every blob it serves; `bake pin` writes the block into a Dockerfile on an image
with huggingface_hub, tokenizers and transformers, built and pushed as v0. Then the model's config
changes at a new commit: `bake add`, `bake publish`, `bake pin` and the build give v1.

- Through the ENTRYPOINT, with no network and HF_HUB_OFFLINE=1, huggingface_hub reads every file of
  every pinned commit, and AutoTokenizer loads, on v0 and on the bumped v1.
- An empty engine per image store pulls v0, then v1: the registry serves v1's changed layers alone on
  the containerd store, and on either store never the weights' blob again.
- The v1 image holds the shared weights' bytes once, and an agent pulls them once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker as docker_sdk
import pytest

from tests.assets import checkpoint_bytes
from tests.engines import SecondEngine, second_engine
from tests.hub_server import LoopbackHub
from tests.registries import OCI_MANIFEST, LocalRegistry, remove_images_named

from . import MACHINE_CA, REPO, build_clients, docker, fail_or_skip, tokenizer_files

# The module fixture publishes, pins and builds two versions, each with a fetch stage that installs
# huggingface_hub: longer than the default bound.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]

RUN = f"hubunits-{uuid.uuid4().hex[:10]}"
MODEL, FORK = "bake-test/units-model", "bake-test/units-fork"
STANDIN = "local/rocm-standin:bookworm"
TEXT = "hello baked world"
WEIGHTS = checkpoint_bytes(2 << 20, seed=b"bake-hubunits-weights")  # 2 MiB, incompressible, an LFS file
THRESHOLD = 1 << 20  # the weights are a unit of their own; every other file rides in its repository's
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]

PROBE = r"""
import hashlib, json, os, sys
from huggingface_hub import constants, hf_hub_download, snapshot_download
from transformers import AutoTokenizer
out = {"offline": constants.HF_HUB_OFFLINE, "pins": {}}
for repo, commit, files in json.loads(sys.argv[1]):
    folder = snapshot_download(repo, revision=commit)
    read = {}
    for path in files:
        with open(hf_hub_download(repo, path, revision=commit), "rb") as f:
            read[path] = hashlib.sha256(f.read()).hexdigest()
    tokens = AutoTokenizer.from_pretrained(repo, revision=commit)(sys.argv[2])["input_ids"]
    out["pins"][f"{repo}@{commit}"] = {"files": read, "folder": folder, "ids": tokens}
print(json.dumps(out))
"""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Version:
    """One built image: its reference by digest, what it pins, and its block's layer blobs."""

    ref: str
    pins: list[tuple[str, str, dict[str, str]]]
    block: list[str]
    sizes: dict[str, int]


class Site:
    """A Dockerfile on the clients image whose block takes bake's units, from the test's own registry."""

    def __init__(self, root: Path, registry: LocalRegistry, clients: str, endpoint: str) -> None:
        self.root, self.registry = root, registry
        self.assets = f"{registry.host}/{RUN}/assets"
        self.runtime = f"{registry.host}/{RUN}/runtime"
        (root / "Dockerfile").write_text(
            f"FROM {clients}\n# bake: the asset units, then the index (`bake pin`)\n"
            f"COPY --link --from={self.assets} / /\nCOPY --link --from={self.runtime} / /\n"
            'ENTRYPOINT ["tini", "--", "bake-entrypoint"]\n'
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        self.env |= {"PYTHONPATH": str(REPO), "HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_XET": "1"}
        self.env |= {"XDG_CACHE_HOME": str(root / "xdg"), "FETCH_IMAGE": STANDIN}
        self.env |= {"SSL_CERT_FILE": str(MACHINE_CA)}  # the fetch stage's pip reaches PyPI with it

    def bake(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "bake", *args], cwd=self.root, env=self.env,
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"bake {' '.join(args[:3])}: {proc.stderr[-4000:]}"
        return proc.stdout

    def manifest(self, name: str, urls: list[str]) -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(f"[units]\nhub_file_threshold = {THRESHOLD}\n")
        for url in urls:
            self.bake("add", url, "--manifest", str(path))
        return path

    def build(self, tag: str, manifest: Path, pins: list[tuple[str, str, dict[str, str]]]) -> Version:
        """Publish, pin and build ``manifest`` as ``tag``, pushed to the registry (``pins``: what it pins)."""
        assets = ["--manifest", str(manifest), "--repository", self.assets]
        self.bake("publish", *assets, *HOST_NETWORK)
        self.bake("pin", *assets, "Dockerfile")
        ref = f"{self.registry.host}/{RUN}/image:{tag}"
        docker(
            "buildx", "build", "--provenance=false", "--output", f"type=image,name={ref},push=true",
            str(self.root), timeout=600,
        )  # fmt: skip
        digest, layers = registry_manifest(self.registry.host, f"{RUN}/image", tag)
        lines = (self.root / "Dockerfile").read_text().splitlines()
        block = sum(f"--from={self.registry.host}/{RUN}/" in line for line in lines)
        sizes = {layer["digest"]: layer["size"] for layer in layers}
        return Version(f"{ref}@{digest}", pins, [layer["digest"] for layer in layers[-block:]], sizes)


def registry_manifest(host: str, name: str, tag: str) -> tuple[str, list[dict]]:
    """The digest the registry serves for ``name:tag``, and the layers of that manifest."""
    accept = f"{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"
    request = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{tag}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers["Docker-Content-Digest"], json.load(answer)["layers"]


@dataclass
class Flow:
    """The built versions and what the test checks them against."""

    registry: LocalRegistry
    versions: dict[str, Version]
    ids: list[int]


def _pins(commits: dict[str, tuple[str, dict]]) -> list[tuple[str, str, dict[str, str]]]:
    """(repo, commit, {path: sha256}) for each repository's pinned commit and its files."""
    return [
        (repo, commit, {path: sha256(v[0] if isinstance(v, tuple) else v) for path, v in files.items()})
        for repo, (commit, files) in commits.items()
    ]


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """v0 (the model and its fork), then v1 (the model's config bumped), each published, pinned, built."""
    root = tmp_path_factory.mktemp("hubunits")
    files, ids = tokenizer_files(TEXT)
    model = {**files, "weights.safetensors": (WEIGHTS, True)}
    fork = {
        **files,
        "README.md": b"# a fork that shares the weights\n",
        "weights.safetensors": (WEIGHTS, True),
    }
    bumped = {**model, "config.json": files["config.json"].replace(b"}", b', "bumped": true}')}
    hub = LoopbackHub(root / "hub")
    commits = {MODEL: (hub.commit(MODEL, model), model), FORK: (hub.commit(FORK, fork), fork)}
    (root / "context").mkdir()
    clients = build_clients(
        REPO / "tests/image/hub-clients.Dockerfile", STANDIN, root / "context", f"bake/{RUN}-clients"
    )
    (root / "registry").mkdir()
    (root / "site").mkdir()
    try:
        with hub, LocalRegistry(root / "registry", level="info") as registry:
            site = Site(root / "site", registry, clients, hub.endpoint)
            site.bake("publish", "--runtime", "--repository", site.runtime, *HOST_NETWORK)
            site.bake("pin", "--runtime", "--repository", site.runtime, "Dockerfile")
            urls = [f"hf://{MODEL}", f"hf://{FORK}"]
            v0 = site.build("v0", site.manifest("v0", urls), _pins(commits))
            commits[MODEL] = (hub.commit(MODEL, bumped), bumped)
            v1 = site.build("v1", site.manifest("v1", urls), _pins(commits))
            yield Flow(registry, {"v0": v0, "v1": v1}, ids)
    finally:
        docker("rmi", clients, check=False)
        remove_images_named(RUN)


@pytest.mark.parametrize("version", ["v0", "v1"])
def test_huggingface_hub_reads_every_file_offline_through_the_entrypoint(flow: Flow, version: str) -> None:
    """No network, HF_HUB_OFFLINE=1, the ENTRYPOINT serving HF_HOME: every file of every pinned commit
    reads back with its bytes, and AutoTokenizer loads, before and after the bump."""
    built = flow.versions[version]
    pins = json.dumps(built.pins)
    proc = docker("run", "--rm", "--network=none", "--env", "HF_HUB_OFFLINE=1", built.ref, "python3", "-c",
                  PROBE, pins, TEXT, check=False, timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["offline"] is True
    assert report["pins"] == {
        f"{repo}@{commit}": {
            "files": files,
            "folder": f"/root/.cache/huggingface/hub/models--{repo.replace('/', '--')}/snapshots/{commit}",
            "ids": flow.ids,
        }
        for repo, commit, files in built.pins
    }


@pytest.fixture(scope="module", params=["classic", "containerd"])
def agent(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecondEngine]:
    """An empty engine of its own, with the classic or the containerd image store (``agent.store``)."""
    dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if dockerd is None:
        fail_or_skip("dockerd is not installed; run scripts/toolchain.sh up")
    with second_engine(dockerd, tmp_path_factory.mktemp("agent"), request.param, "bake-hubunits") as engine:
        yield engine


def _pull(agent: SecondEngine, flow: Flow, version: str) -> dict[str, int]:
    """Pull ``version`` on the agent; return the bytes the registry served for each of its layer blobs."""
    built = flow.versions[version]
    mark = flow.registry.log_size()
    repo, digest = built.ref.split("@")
    try:
        agent.client.images.pull(repo, tag=digest)
    except docker_sdk.errors.APIError as exc:
        raise AssertionError(f"{agent.store} agent: docker pull {built.ref}: {exc}") from None
    return {blob: n for blob, n in flow.registry.blob_gets(since=mark).items() if blob in built.sizes}


def test_an_agent_pulls_the_shared_weights_once_and_a_bump_moves_only_what_changed(
    flow: Flow, agent: SecondEngine
) -> None:
    """v0: the weights, in both repositories, are one layer, pulled once. v1, a config-only bump: on the
    containerd store the registry serves exactly v1's changed layers (the model's own unit and the
    index); on the classic store, which pulls again every layer above a changed one, never the weights."""
    v0, v1 = flow.versions["v0"], flow.versions["v1"]
    (weights,) = [blob for blob in v0.block if v0.sizes[blob] >= len(WEIGHTS)]
    assert v0.sizes[weights] < 2 * len(WEIGHTS), "the shared file's bytes are in its layer once"
    first = _pull(agent, flow, "v0")
    assert first[weights] == v0.sizes[weights]
    assert weights in v1.block, "the bump kept the weights' unit"
    second = _pull(agent, flow, "v1")
    changed = set(v1.block) - set(v0.block)
    assert changed and weights not in second, (agent.store, second)
    if agent.store == "containerd":
        assert second == {blob: v1.sizes[blob] for blob in changed}
    else:
        assert changed <= set(second)


def test_bake_testing_passes_on_the_bumped_image(flow: Flow, tmp_path: Path) -> None:
    """The plugin a team runs on any image, on v1 built from the units: every asset present with its size,
    sha256, owner and modes, SHA256SUMS, each location served through the ENTRYPOINT, doctor inside."""
    image = flow.versions["v1"].ref.split("@")[0]
    env = {k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "bake.testing", "--bake-image", image,
         "-p", "no:cacheprovider", "-rfs"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]

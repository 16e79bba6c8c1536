"""From one real job to an offline one: the real clients in a container fill empty caches from a
loopback Hub and mirror, `bake harvest` pins what they read into a new manifest, `bake fetch` and
`bake seal` make the asset root, and the same job runs again through the ENTRYPOINT with
BAKE_OFFLINE=1, new empty caches, ``--network none`` and every server stopped.

The sealed root is bind-mounted read-only at /opt/bake/assets of the clients image (the layout
`seal` wrote, byte for byte, without another image build). The job reports every file it opened
(Python's audit hook; openai-harmony, in Rust, reads TIKTOKEN_ENCODINGS_BASE, which is checked
itself): each must resolve into /opt/bake/assets, or be bake's verified copy of a baked file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.assets import mirror_args
from tests.hub_server import LoopbackHub
from tests.runners import bake

from . import ASSET_ROOT, build_clients, docker, required_env

pytestmark = pytest.mark.docker

TOKENIZER_CONFIG = b'{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}'

JOB = r"""
import hashlib, json, os, sys
opened = set()
def _audit(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        opened.add(os.fsdecode(args[0]))
sys.addaudithook(_audit)
mode, mirror = sys.argv[1:3]
import tiktoken.load
if mode == "cold":  # tiktoken's own cache code; only its transport goes to the loopback mirror
    import urllib.request
    def read_file(url):
        url = url.replace("https://openaipublic.blob.core.windows.net/", mirror + "/openaipublic/")
        with urllib.request.urlopen(url) as response:
            return response.read()
    tiktoken.load.read_file = read_file
from huggingface_hub import snapshot_download
from transformers import AutoTokenizer
snapshot_download("org/tok", allow_patterns=["*.json"])
out = {"ids": AutoTokenizer.from_pretrained("org/tok")("hello baked world")["input_ids"]}
out["tokens"] = tiktoken.get_encoding("o200k_base").encode("Hello, world!")
if mode == "offline":
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    harmony = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    out["harmony"] = harmony.encode("Hello, world!", allowed_special="all")
out["env"] = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TIKTOKEN_ENCODINGS_BASE")}
places = ("/cache", "/tmp", "/root", "/opt/bake")
files = sorted(p for p in opened if p.startswith(places) and os.path.isfile(p))
out["opened"] = {p: [os.path.realpath(p), hashlib.sha256(open(p, "rb").read()).hexdigest()] for p in files}
print(json.dumps(out))
"""


def _tokenizer_json() -> bytes:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["hello baked world"] * 3, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    return tok.to_str().encode()


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image under test plus the clients the job uses (no torch), removed afterwards."""
    dockerfile = Path(__file__).with_name("harvest-clients.Dockerfile")
    context = tmp_path_factory.mktemp("harvest-clients-context")
    tag = build_clients(dockerfile, required_env("BAKE_TEST_IMAGE"), context, "bake/rocm-harvest-clients")
    yield tag
    docker("rmi", tag, check=False)


def _job(clients: str, mode: str, mirror: str, *options: str) -> dict:
    proc = docker(
        "run", "--rm", *options, clients, "python3", "-c", JOB, mode, mirror, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(1500)
def test_a_harvested_job_runs_again_offline_in_a_container(clients: str, tmp_path: Path) -> None:
    mirror = required_env("BAKE_TEST_MIRROR")
    cache = tmp_path / "cache"
    cache.mkdir()
    hub = LoopbackHub(tmp_path / "hub")
    files = {
        "tokenizer.json": _tokenizer_json(),
        "tokenizer_config.json": TOKENIZER_CONFIG,
        "config.json": b"{}",
    }
    hub.commit("org/tok", {**files, "weights.bin": (b"w" * 4096, True)})
    with hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": "/cache/hf", "HF_HUB_DISABLE_XET": "1"}
        env |= {"TIKTOKEN_CACHE_DIR": "/cache/tiktoken", "XDG_CACHE_HOME": "/cache/xdg"}
        options = ["--network=host", "--entrypoint=", "--mount", f"type=bind,src={cache},dst=/cache"]
        first = _job(
            clients, "cold", mirror, *options, *(a for k, v in env.items() for a in ("--env", f"{k}={v}"))
        )
        manifest = tmp_path / "assets.toml"
        proc = bake("harvest", cache / "hf", cache / "tiktoken", "--manifest", manifest)
        assert proc.returncode == 0 and "not pinned" not in proc.stderr, proc.stderr
        dest = tmp_path / "assets"
        fetch_env = {
            "HF_ENDPOINT": hub.endpoint,
            "HF_HUB_DISABLE_XET": "1",
            "XDG_CACHE_HOME": str(tmp_path / "c"),
        }
        fetch_env["BAKE_MIRRORS"] = " ".join(mirror_args(mirror))
        for args in (("fetch", "-q", "--dest", dest), ("seal", "--dest", dest)):
            done = bake(*args, "--manifest", manifest, env=fetch_env)
            assert done.returncode == 0, done.stderr
    # The Hub is stopped, the mirror unreachable (--network none), the caches new and empty.
    offline = ["--network=none", "--mount", f"type=bind,src={dest},dst={ASSET_ROOT},readonly"]
    offline += ["--env", "BAKE_OFFLINE=1", "--env", "HF_HOME=/cache/hf", "--env", "XDG_CACHE_HOME=/cache/xdg"]
    offline += ["--mount", "type=tmpfs,dst=/cache"]
    second = _job(clients, "offline", "http://127.0.0.1:9", *offline)
    assert (second["ids"], second["tokens"]) == (first["ids"], first["tokens"])
    assert second["harmony"] == first["tokens"]
    assert second["env"] == {"HF_HUB_OFFLINE": "1", "TIKTOKEN_ENCODINGS_BASE": f"{ASSET_ROOT}/tiktoken"}
    names = list(second["opened"])
    assert any(n.endswith("/tokenizer.json") for n in names) and any("/bake-TIKTOKEN" in n for n in names), (
        names
    )
    for path, (real, sha256) in second["opened"].items():
        if real.startswith(f"{ASSET_ROOT}/"):
            continue
        # Else bake's verified copy of a baked file (the Hub's refs: huggingface_hub rewrites them).
        baked = dest / "hub" / Path(path).relative_to("/cache/hf/hub")
        assert sha256 == hashlib.sha256(baked.read_bytes()).hexdigest(), f"{path}: not baked"

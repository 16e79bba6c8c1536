"""Helpers shared by the image tests: run docker, run the image, snapshot a host tree, probe clients."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import docker as docker_sdk
import pytest

from bake.consumers import SERVE_NAME
from bake.index import LOCK_NAME, SUMS_NAME
from bake.manifest import Manifest, load_manifest
from bake.offline import NAME as OFFLINE_NAME
from bake.seal import alias_links

REPO = Path(__file__).resolve().parents[2]
ASSET_ROOT = "/opt/bake/assets"
MANIFEST: Manifest = load_manifest(Path(__file__).with_name("assets.toml"))
# The test manifest's first asset of each built-in consumer.
(S3_ASSET,) = [a for a in MANIFEST if a.name == "speech_tokenizer_v3_25hz"]
(VOCAB_ASSET,) = [a for a in MANIFEST if a.name == "o200k_base"]
# What seal puts beside the assets: the index files, bake.serve, and the consumers' alias links.
INDEX_NAMES = (SUMS_NAME, LOCK_NAME, SERVE_NAME, OFFLINE_NAME)
ALIAS_LINKS = alias_links(MANIFEST)
# Every directory of the tree: the root and each asset's ancestors (consumer files may nest).
ASSET_SUBDIRS = sorted({str(p) for a in MANIFEST for p in Path(a.path).parents if str(p) != "."})
S3_NAME = S3_ASSET.path.split("/")[-1]
VOCAB_NAME = VOCAB_ASSET.path.split("/")[-1]

# ``run(*command, **options)``: run_image bound to the image under test (the ``run`` fixture).
Run = Callable[..., subprocess.CompletedProcess[str]]

# Text the client probes encode, and its o200k_base tokens (computed once with the real vocab).
PROBE_TEXT = "Hello, world! Baked assets load offline."
PROBE_TOKENS = [13225, 11, 2375, 0, 418, 19969, 17862, 4700, 33467, 13]


def fail_or_skip(problem: str) -> None:
    """Skip the test for a missing prerequisite; under CI=true fail it instead, since CI must run it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: image tests must run, never skip)", pytrace=False)
    pytest.skip(problem)


def required_env(name: str) -> str:
    """Return the environment variable that scripts/test.sh sets, or fail/skip naming it."""
    value = os.environ.get(name, "")
    if not value:
        fail_or_skip(f"{name} is not set: run the image tests through scripts/test.sh, which sets it")
    return value


@functools.cache
def engine() -> docker_sdk.DockerClient:
    """The engine through the docker SDK (``docker.from_env()``: DOCKER_HOST and the rest, as the CLI)."""
    return docker_sdk.from_env(timeout=600)


def inspect_image(ref: str) -> dict:
    """The engine's inspection of image ``ref`` (labels, RootFS layers, RepoTags…). Raises ImageNotFound."""
    return engine().images.get(ref).attrs


def remove_image(ref: str) -> None:
    """Remove image ``ref`` (a tag or an ID), whatever still names it; a missing image is fine."""
    try:
        engine().images.remove(ref, force=True)
    except docker_sdk.errors.ImageNotFound:
        pass


def push(ref: str) -> None:
    """Push ``ref``. Raises AssertionError naming the error the registry sent (the SDK only streams it)."""
    repository, tag = ref.rsplit(":", 1)
    for line in engine().images.push(repository, tag, stream=True, decode=True):
        if "error" in line:
            raise AssertionError(f"push {ref}: {line['error']}")


def docker(
    *args: str, timeout: float = 180, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``docker ARGS`` and return the finished process.

    Raises AssertionError naming the command and its stderr when ``check`` and it fails.
    """
    proc = subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:4])} … exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def run_image(
    image: str,
    *command: str,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    binds: Mapping[str | Path, str] | None = None,
    tmpfs: Sequence[str] = (),
    read_only: bool = False,
    entrypoint: str | None = None,
    workdir: str | None = None,
    network: str = "none",
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``docker run --rm --network none`` the image with these options; return the finished process."""
    args = ["run", "--rm", f"--network={network}"]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    if user is not None:
        args += ["--user", user]
    for src, dst in (binds or {}).items():
        args += ["--mount", f"type=bind,src={src},dst={dst}"]
    for dst in tmpfs:
        args += ["--mount", f"type=tmpfs,dst={dst}"]
    if read_only:
        args.append("--read-only")
    if entrypoint is not None:
        args += ["--entrypoint", entrypoint]
    if workdir is not None:
        args += ["--workdir", workdir]
    return docker(*args, image, *command, check=False, timeout=timeout)


def tree_snapshot(root: Path) -> dict[str, tuple]:
    """Map every path under ``root`` (itself included) to its type, mode, size, content and mtime.

    Links are recorded by target and never followed, so a dangling link is data too.
    """
    snap = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            content = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            content = None
        snap[str(path.relative_to(root))] = (
            stat.S_IFMT(st.st_mode),
            stat.S_IMODE(st.st_mode),
            st.st_size,
            content,
            st.st_mtime_ns,
        )
    return snap


# Loads each client named in argv offline and prints one JSON report. urllib's urlopen is
# replaced by a function that records and refuses, so any download attempt shows.
# s3tokenizer: importing it imports torch, so its own table and loader functions are lifted
# out of the installed source with ast and run against a stand-in model class that records
# the checkpoint path and stops before init_from_onnx would build the torch model.
CLIENT_PROBE = r"""
import ast, hashlib, importlib.util, json, os, sys, typing, urllib.request, warnings

TEXT = sys.argv[1]
attempts = []


def refuse(url, *args, **kwargs):
    attempts.append(getattr(url, "full_url", str(url)))
    raise OSError("download attempted: " + attempts[-1])


urllib.request.urlopen = refuse


def entries(directory):
    return {n: os.path.realpath(os.path.join(directory, n)) for n in sorted(os.listdir(directory))}


def harmony(_=None):
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    tokens = enc.encode(TEXT)
    cache = os.environ["TIKTOKEN_RS_CACHE_DIR"]
    return {"tokens": tokens, "text": enc.decode(tokens), "cache": cache, "entries": entries(cache)}


def tiktoken(encoding="o200k_base"):
    import tiktoken

    enc = tiktoken.get_encoding(encoding)
    tokens = enc.encode(TEXT)
    cache = os.environ["TIKTOKEN_CACHE_DIR"]
    return {"tokens": tokens, "text": enc.decode(tokens), "cache": cache, "entries": entries(cache)}


def nltk(_=None):
    from nltk.corpus import stopwords

    words = stopwords.words("english")
    data = os.environ.get("NLTK_DATA", "")
    return {"words": words, "data": data, "entries": entries(os.path.join(data, "corpora", "stopwords"))}


def s3tokenizer(model="speech_tokenizer_v3_25hz"):
    origin = importlib.util.find_spec("s3tokenizer").origin
    wanted = {"_MODELS", "_SHA256S", "_download", "available_models", "load_model"}
    body = [
        node for node in ast.parse(open(origin).read()).body
        if (isinstance(node, ast.FunctionDef) and node.name in wanted)
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in wanted for t in node.targets))
    ]
    recorded = []

    class Stop(Exception):
        pass

    class Model:
        def __init__(self, name):
            self.name = name

        def init_from_onnx(self, path):
            recorded.append(path)
            raise Stop(path)

    import tqdm

    namespace = {
        "hashlib": hashlib, "os": os, "urllib": urllib, "warnings": warnings, "tqdm": tqdm.tqdm,
        "List": typing.List, "Union": typing.Union,
        "S3Tokenizer": Model, "S3TokenizerV2": Model, "S3TokenizerV3": Model,
    }
    exec(compile(ast.Module(body=body, type_ignores=[]), origin, "exec"), namespace)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            namespace["load_model"](model)
        except Stop:
            pass
    return {
        "defined": sorted(wanted & namespace.keys()),
        "recorded": recorded,
        "realpaths": [os.path.realpath(p) for p in recorded],
        "table_sha256": namespace["_SHA256S"][model],
        "warnings": [str(w.message) for w in caught],
    }


def hub(repo):
    from huggingface_hub import snapshot_download

    folder = snapshot_download(repo, local_files_only=True)
    return {"folder": folder, "entries": entries(folder)}


report = {}
for spec in sys.argv[2:]:  # CLIENT or CLIENT:ARGUMENT (an encoding, a model)
    name, _, argument = spec.partition(":")
    try:
        report[spec] = {"ok": True, **globals()[name](*([argument] if argument else []))}
    except Exception as exc:
        report[spec] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
report["attempts"] = attempts
report["torch_imported"] = "torch" in sys.modules
variables = ("XDG_CACHE_HOME", "TIKTOKEN_RS_CACHE_DIR", "TIKTOKEN_CACHE_DIR", "NLTK_DATA", "HF_HOME")
report["env"] = {k: os.environ.get(k) for k in variables}
print(json.dumps(report))
"""


def tokenizer_files(text: str) -> tuple[dict[str, bytes], list[int]]:
    """A WordLevel tokenizer trained here, its transformers config, and the ids it gives ``text``: the
    small files of a Hub model that transformers loads offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["hello baked world", "assets load offline from the baked layer"] * 3
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"]))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]"}
    files = {
        "tokenizer.json": tok.to_str().encode(),
        "tokenizer_config.json": json.dumps(config).encode(),
        "config.json": json.dumps({"model_type": "bert", "vocab_size": tok.get_vocab_size()}).encode(),
    }
    return files, tok.encode(text).ids


def buildx_bake(*args: str, **env: str) -> None:
    """Run ``docker buildx bake`` with the test override, as scripts/test.sh does.

    The test's mirror, token and digest come from the environment unless ``env`` overrides them.
    Raises AssertionError with the build log's tail when bake fails.
    """
    for name in ("ASSET_MIRRORS", "ASSET_DIGEST", "BAKE_TEST_HF_TOKEN"):
        env.setdefault(name, required_env(name))
    proc = subprocess.run(
        ["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", "docker/bake-test.hcl",
         "--allow=network.host", "--progress=plain", *args],
        cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]


MACHINE_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def build_clients(dockerfile: Path, image: str, context: Path, tag_prefix: str) -> str:
    """Build ``dockerfile`` on ``image`` (clients from PyPI, the machine CA as a secret); return the tag."""
    if not MACHINE_CA.is_file():
        fail_or_skip(f"{MACHINE_CA} is missing: pip inside the build needs the machine CA to reach PyPI")
    tag = f"{tag_prefix}:{uuid.uuid4().hex[:12]}"
    docker(
        "buildx", "build", "--network=host", "--allow=network.host", "--load",
        "--secret", f"id=ca,src={MACHINE_CA}", "--build-arg", f"IMAGE={image}",
        "--file", str(dockerfile), "--tag", tag, str(context),
        timeout=900,
    )  # fmt: skip
    return tag


def bake_image(tag: str, *args: str, **env: str) -> None:
    """Build the image target under ``tag`` (see buildx_bake)."""
    buildx_bake(*args, "--set", f"image.tags={tag}", "image", **env)

"""Hub repositories baked into an image, found offline by huggingface_hub and transformers.

A loopback Hub (tests/hub_server.py) holds a small model repository (a tokenizer
trained here with the `tokenizers` package, its config, and an LFS weight file the
Hub redirects to its CDN) behind the test token, and a small dataset. `bake add`
pins both; the image is built with that manifest (the token reaches the build only
as the `hf_token` secret); a derived image adds huggingface_hub, tokenizers and
transformers. Then, with `--network none` and HF_HUB_OFFLINE=1, snapshot_download,
hf_hub_download and AutoTokenizer.from_pretrained must succeed:

- with HF_HUB_CACHE=/opt/bake/assets/hub and no entrypoint at all;
- through the ENTRYPOINT with HF_HOME unset, an empty writable HF_HOME, and a docker
  volume shared with images that lack these files, which must gain only the
  documented additions (verified copies, relative links, refs, tree, lock files)
  and never a link into the image.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub_server import LoopbackHub

from . import ASSET_ROOT, REPO, bake_image, docker, fail_or_skip, required_env, run_image, tokenizer_files

pytestmark = pytest.mark.docker

MODEL, DATASET = "bake-test/tiny-tokenizer", "bake-test/tiny-set"
MACHINE_CA = "/etc/ssl/certs/ca-certificates.crt"
STANDIN = "local/rocm-standin:bookworm"  # an image that lacks the baked files
WEIGHTS = hashlib.sha256(b"tiny weights").digest() * (32 * 1024)  # 1 MiB, an LFS file
TRAIN_CSV = "text,label\nhello baked world,1\n"
PROBE_TEXT = "hello baked world"

PROBE = r"""
import hashlib, json, os, sys
model, commit, dataset, ds_commit, text = sys.argv[1:6]
from huggingface_hub import constants, hf_hub_download, snapshot_download
from transformers import AutoTokenizer
out = {"cache": constants.HF_HUB_CACHE, "offline": constants.HF_HUB_OFFLINE}
out["snapshot"] = snapshot_download(model, revision=commit)
out["files"] = sorted(os.listdir(out["snapshot"]))
weights = hf_hub_download(model, "weights.bin", revision=commit)
out["weights_sha256"] = hashlib.sha256(open(weights, "rb").read()).hexdigest()
csv = hf_hub_download(dataset, "data/train.csv", repo_type="dataset", revision=ds_commit)
out["dataset"] = open(csv).read()
out["ids"] = AutoTokenizer.from_pretrained(model, revision=commit)(text)["input_ids"]
print(json.dumps(out))
"""

# What a node's volume may gain under <cache>/: blobs (real files), snapshot links, refs,
# the tree listing, huggingface_hub's own lock files and bake's lock and stamps (under .locks/.bake),
# plus the directories holding them.
ADDITIONS = re.compile(
    r"^hub(/\.locks(/(models|datasets)--[^/]+(/.*)?|/\.bake(/lock|/served\.[0-9a-f]{64}\.copied)?)?"
    r"|/(models|datasets)--[^/]+(/(blobs|refs|trees|snapshots)(/.*)?)?)?$"
)

# Prints every path under a directory: type, mode, owner, size, and its sha256 or link target.
LISTING = r"""
import hashlib, json, os, stat, sys
root = sys.argv[1]
out = {}
for base, dirs, files in os.walk(root):
    for name in dirs + files:
        path = os.path.join(base, name)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            body = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            body = hashlib.sha256(open(path, "rb").read()).hexdigest()
        else:
            body = None
        out[os.path.relpath(path, root)] = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid,
                                            st.st_size, body, st.st_mtime_ns]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopbackHub, dict]]:
    server = LoopbackHub(tmp_path_factory.mktemp("hub"))
    files, ids = tokenizer_files(PROBE_TEXT)
    token = required_env("BAKE_TEST_HF_TOKEN")
    commit = server.commit(MODEL, {**files, "weights.bin": (WEIGHTS, True)}, token=token)
    ds_commit = server.commit(
        DATASET, {"data/train.csv": TRAIN_CSV.encode(), "README.md": b"# tiny\n"}, kind="dataset"
    )
    with server:
        yield server, {"commit": commit, "ds_commit": ds_commit, "ids": ids, "token": token}


def _bake_cli(*args: str, env: dict) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    full |= {"PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        ["python3", "-m", "bake", *args], cwd=REPO, env=full, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def manifest(hub: tuple[LoopbackHub, dict], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The manifest `bake add` writes for both repositories, inside the build context (.work/)."""
    server, facts = hub
    path = REPO / ".work" / f"hub-assets-{uuid.uuid4().hex[:8]}.toml"
    path.parent.mkdir(exist_ok=True)
    env = {"HF_ENDPOINT": server.endpoint, "HF_TOKEN": facts["token"]}
    env |= {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("xdg")), "HF_HUB_DISABLE_XET": "1"}
    for url in (f"hf://{MODEL}", f"hf://datasets/{DATASET}"):
        proc = _bake_cli("add", url, "--manifest", str(path), env=env)
        assert proc.returncode == 0, proc.stderr
        assert facts["token"] not in proc.stdout + proc.stderr
    yield str(path.relative_to(REPO))
    path.unlink()


def _build_args(server: LoopbackHub, manifest: str) -> dict[str, str]:
    # The test override's --no-origin stays: HF_ENDPOINT counts as a rewrite. A fresh cache dir
    # keeps an earlier run's cache mount from serving the bytes.
    digest = _bake_cli("manifest", "digest", "--manifest", manifest, env={})
    assert digest.returncode == 0, digest.stderr
    return {
        "ASSET_MANIFEST": manifest,
        "ASSET_MIRRORS": "",
        "ASSET_DIGEST": digest.stdout.strip(),
        "HF_ENDPOINT": server.endpoint,
        "BAKE_TEST_CA_BUNDLE": MACHINE_CA,
        "BAKE_FETCH_ARGS": f"--no-origin --cache-dir /tmp/bake-hub-{uuid.uuid4().hex}",
    }


@pytest.fixture(scope="module")
def hub_image(hub: tuple[LoopbackHub, dict], manifest: str) -> Iterator[str]:
    server, _ = hub
    tag = f"bake/rocm-test-i12-hub:{uuid.uuid4().hex[:12]}"
    bake_image(tag, f"--allow=fs.read={MACHINE_CA}", **_build_args(server, manifest))
    yield tag
    docker("rmi", tag, check=False)


@pytest.fixture(scope="module")
def clients(hub_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The baked image plus huggingface_hub, tokenizers and transformers."""
    if not Path(MACHINE_CA).is_file():
        fail_or_skip(f"{MACHINE_CA} is missing: pip inside the build needs the machine CA to reach PyPI")
    tag = f"bake/rocm-hub-clients:{uuid.uuid4().hex[:12]}"
    docker(
        "buildx", "build", "--network=host", "--allow=network.host", "--load",
        "--secret", f"id=ca,src={MACHINE_CA}", "--build-arg", f"IMAGE={hub_image}",
        "--file", str(Path(__file__).with_name("hub-clients.Dockerfile")), "--tag", tag,
        str(tmp_path_factory.mktemp("hub-clients-context")),
        timeout=900,
    )  # fmt: skip
    yield tag
    docker("rmi", tag, check=False)


def run(image: str, *command: str, volume: str | None = None, **options) -> subprocess.CompletedProcess[str]:
    """``run_image`` (``--network none``), with a named docker volume mounted at /hf when given."""
    if volume is None:
        return run_image(image, *command, **options)
    env = options.pop("env", {})
    readonly = ",readonly" if options.pop("readonly", False) else ""
    args = ["run", "--rm", "--network=none", "--mount", f"type=volume,src={volume},dst=/hf{readonly}"]
    args += [a for k, v in env.items() for a in ("--env", f"{k}={v}")]
    if "entrypoint" in options:
        args += ["--entrypoint", options.pop("entrypoint")]
    assert not options, options
    return docker(*args, image, *command, check=False, timeout=120)


def probe(clients: str, facts: dict, **options) -> dict:
    """Run PROBE in the clients image, offline; return its report."""
    options["env"] = {"HF_HUB_OFFLINE": "1", **options.get("env", {})}
    args = [MODEL, facts["commit"], DATASET, facts["ds_commit"], PROBE_TEXT]
    proc = run(clients, "python3", "-c", PROBE, *args, **options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ready = [line for line in proc.stderr.splitlines() if line.startswith("bake: assets ready in")]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "ready": ready}


def check_report(report: dict, facts: dict) -> None:
    assert report["offline"] is True
    assert report["snapshot"].endswith(f"/models--bake-test--tiny-tokenizer/snapshots/{facts['commit']}")
    assert report["files"] == ["config.json", "tokenizer.json", "tokenizer_config.json", "weights.bin"]
    assert report["weights_sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert report["dataset"] == TRAIN_CSV
    assert report["ids"] == facts["ids"]


def test_the_baked_cache_needs_no_further_step(clients: str, hub: tuple[LoopbackHub, dict]) -> None:
    """HF_HUB_CACHE pointed at the baked tree, with no entrypoint: read-only and complete."""
    env = {"HF_HUB_CACHE": f"{ASSET_ROOT}/hub"}
    report = probe(clients, hub[1], env=env, entrypoint="")
    check_report(report, hub[1])
    assert report["cache"] == f"{ASSET_ROOT}/hub"


@pytest.mark.parametrize(
    ("case", "options", "cache"),
    [
        ("HF_HOME unset", {}, "/root/.cache/huggingface/hub"),
        ("HF_HOME an empty writable dir", {"env": {"HF_HOME": "/e"}, "tmpfs": ["/e"]}, "/e/hub"),
        ("HF_HOME on the container's fs", {"env": {"HF_HOME": "/tmp/new"}}, "/tmp/new/hub"),
        ("HF_HUB_CACHE wins", {"env": {"HF_HUB_CACHE": "/tmp/c", "HF_HOME": "/tmp/unused"}}, "/tmp/c"),
    ],
)
def test_jobs_find_the_baked_repositories_offline(
    case: str, options: dict, cache: str, clients: str, hub: tuple[LoopbackHub, dict]
) -> None:
    report = probe(clients, hub[1], **options)
    check_report(report, hub[1])
    assert report["cache"] == cache


def test_an_unwritable_node_cache_fails_fast_under_bake_require(
    node_volume: str, clients: str, hub: tuple[LoopbackHub, dict]
) -> None:
    """A read-only node HF_HOME that lacks the files: BAKE_REQUIRE=1 stops with exit 6 naming it."""
    env = {"HF_HOME": "/hf", "BAKE_REQUIRE": "1"}
    proc = run(clients, "true", volume=node_volume, readonly=True, env=env)
    assert proc.returncode == 6, proc.stderr
    assert "/hf/hub" in proc.stderr
    started = run(clients, "sh", "-c", "exit 7", volume=node_volume, readonly=True, env={"HF_HOME": "/hf"})
    assert started.returncode == 7 and "/hf/hub" in started.stderr  # a warning, and the job runs


def _listing(volume: str) -> dict:
    proc = run(STANDIN, "python3", "-c", LISTING, "/hf", volume=volume, entrypoint="")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def node_volume() -> Iterator[str]:
    """A node's persistent HF_HOME, already holding another model, a token and a stale ref."""
    name = f"bake-i12-hf-{uuid.uuid4().hex[:10]}"
    docker("volume", "create", name)
    other, ours, c1, c2 = (
        "hub/models--other--model",
        f"hub/models--{MODEL.replace('/', '--')}",
        "1" * 40,
        "2" * 40,
    )
    seed = (
        f"set -eu; cd /hf; mkdir -p {other}/blobs {other}/refs {other}/snapshots/{c1} {ours}/refs; "
        f"printf 'other bytes' > {other}/blobs/abc; ln -s ../../blobs/abc {other}/snapshots/{c1}/f; "
        f"printf {c1} > {other}/refs/main; printf {c2} > {ours}/refs/main; printf 'hf_node_token' > token"
    )
    proc = run(STANDIN, "sh", "-c", seed, volume=name, entrypoint="")
    assert proc.returncode == 0, proc.stderr
    yield name
    docker("volume", "rm", "-f", name, check=False)


def test_a_shared_volume_gains_only_documented_verified_copies(
    node_volume: str, clients: str, hub: tuple[LoopbackHub, dict]
) -> None:
    before = _listing(node_volume)
    for job in ("first job", "later job"):  # the later job finds the first one's copies
        report = probe(clients, hub[1], env={"HF_HOME": "/hf"}, volume=node_volume)
        check_report(report, hub[1])
        assert len(report["ready"]) == 1 and "not served" not in report["ready"][0], report["ready"]
        print(f"\nseeding the node volume, {job}: {report['ready'][0]}")
    after = _listing(node_volume)
    # Files and links keep every byte and their mtime; a directory that gained an entry has a new
    # mtime (and size) by nature, so directories are compared by type, mode and owner.
    kept = {k: v[:3] if v[0] == 0o040000 else v for k, v in before.items()}
    assert {
        k: after[k][:3] if k in after and after[k][0] == 0o040000 else after.get(k) for k in before
    } == kept
    added = sorted(set(after) - set(before))
    assert added and all(ADDITIONS.match(p) for p in added), [p for p in added if not ADDITIONS.match(p)]
    for path in added:
        kind, _, _, _, body, _ = after[path]
        if kind == 0o120000:  # a link: relative, and it resolves inside the volume to a verified blob
            assert not body.startswith("/"), f"{path} -> {body} points into the image"
            target = os.path.normpath(os.path.join(os.path.dirname(path), body))
            assert after.get(target, [0])[0] == 0o100000, f"{path} -> {body} dangles in another image"
    # An image that lacks the baked files reads the copies through the links.
    reader = "import pathlib,sys; print(pathlib.Path(sys.argv[1]).read_text())"
    snap = f"/hf/hub/models--{MODEL.replace('/', '--')}/snapshots/{hub[1]['commit']}/tokenizer_config.json"
    proc = run(STANDIN, "python3", "-c", reader, snap, volume=node_volume, entrypoint="")
    assert proc.returncode == 0 and "PreTrainedTokenizerFast" in proc.stdout, proc.stderr


def _export_assets(server: LoopbackHub, manifest: str, out: Path) -> dict:
    """Build the assets target into ``out``; return every path's mode, mtime and bytes or link target."""
    from . import buildx_bake

    allow = [f"--allow=fs.read={MACHINE_CA}", f"--allow=fs.write={out.parent}"]  # buildx asks for the parent
    buildx_bake(
        *allow, "--set", f"assets.output=type=local,dest={out}", "assets", **_build_args(server, manifest)
    )
    listing = {}
    for p in sorted(out.rglob("*")):
        st = p.lstat()
        body = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
        listing[str(p.relative_to(out))] = (st.st_mode, st.st_mtime_ns, body)
    return listing


def test_two_fetches_give_the_same_layer_bytes(
    hub: tuple[LoopbackHub, dict], manifest: str, tmp_path: Path
) -> None:
    """Two cold fetches of one manifest: same paths, modes, mtimes, bytes and link targets."""
    first, second = (_export_assets(hub[0], manifest, tmp_path / name) for name in ("a", "b"))
    assert first == second
    assert any(p.endswith("/refs/main") for p in first)
    assert any("/snapshots/" in p and p.endswith("/tokenizer.json") for p in first)


def test_the_token_is_in_no_layer_and_no_history(
    hub_image: str, hub: tuple[LoopbackHub, dict], tmp_path: Path
) -> None:
    token = hub[1]["token"]
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", hub_image).stdout
    assert token not in history
    archive = tmp_path / "image.tar"
    docker("save", "--output", str(archive), hub_image, timeout=600)
    with open(archive, "rb") as fh:
        tail = b""
        while block := fh.read(1 << 20):
            assert token.encode() not in tail + block
            tail = block[-len(token) :]


def test_an_origin_that_changed_after_add_fails_the_build_naming_the_file(
    hub: tuple[LoopbackHub, dict], manifest: str, hub_image: str
) -> None:
    server, facts = hub
    server.replace(DATASET, facts["ds_commit"], "data/train.csv", b"text,label\ntampered,0\n", kind="dataset")
    try:
        args = _build_args(server, manifest)
        cmd = ["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", "docker/bake-test.hcl"]
        cmd += ["--allow=network.host", f"--allow=fs.read={MACHINE_CA}", "--progress=plain", "assets"]
        env = {**os.environ, **args, "BAKE_TEST_HF_TOKEN": facts["token"]}
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
        )
    finally:
        server.replace(DATASET, facts["ds_commit"], "data/train.csv", TRAIN_CSV.encode(), kind="dataset")
    assert proc.returncode != 0
    assert (
        "exit code: 3" in proc.stderr and f"{DATASET}@{facts['ds_commit'][:12]}/data/train.csv" in proc.stderr
    )
    assert facts["token"] not in proc.stderr


def test_concurrent_first_jobs_on_one_node_volume(clients: str, hub: tuple[LoopbackHub, dict]) -> None:
    """Four jobs start at once on a fresh volume: each is served, and the copies that land are whole."""
    name = f"bake-i12-hf-{uuid.uuid4().hex[:10]}"
    docker("volume", "create", name)
    try:
        facts = hub[1]
        args = [MODEL, facts["commit"], DATASET, facts["ds_commit"], PROBE_TEXT]
        cmd = ["docker", "run", "--rm", "--network=none", "--mount", f"type=volume,src={name},dst=/hf"]
        cmd += ["--env", "HF_HOME=/hf", "--env", "HF_HUB_OFFLINE=1", clients, "python3", "-c", PROBE, *args]
        jobs = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
        ]
        for job in jobs:
            out, err = job.communicate(timeout=180)
            assert job.returncode == 0, err[-2000:]
            check_report(json.loads(out.strip().splitlines()[-1]), facts)
        after = _listing(name)
        blobs = {p: v for p, v in after.items() if "/blobs/" in p and v[0] == 0o100000}
        assert blobs and all(
            v[4] == p.rsplit("/", 1)[1] for p, v in blobs.items() if len(p.rsplit("/", 1)[1]) == 64
        )
        assert not [p for p in after if ".incomplete" in p or "tmp" in p.rsplit("/", 1)[-1]]
    finally:
        docker("volume", "rm", "-f", name, check=False)

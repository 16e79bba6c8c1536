"""vLLM's ROCm CI as a stand-in (docker/examples/vllm/) with its own wrapper, on the real engine and registry.

The flow is vLLM's with bake's pinned integration: ``bake publish`` the assets and runtime
images, ``bake pin`` the stand-in's docker/examples/vllm/docker/Dockerfile.rocm, commit, then CI
runs everything through its docker/examples/vllm/.buildkite/scripts/ci-bake-rocm.sh, which (as
Buildkite runs it, BUILDKITE=true) builds from HEAD's git tree, refusing what that tree would lack,
and rebuilds ci_base only when its content hash (files, stage text, ARG values) differs from the
published image's label. The tests walk a
history (v1; unchanged; requirements changed; manifest changed) and check what the issue asks:
the hash moves with a pin and only then, the asset layer is shared, every other target builds
without bake's images, removing bake's lines leaves no asset behind, the digests agree, the
plugin passes, and a second, empty engine pulls v2's asset layer as "Already exists".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import docker as docker_sdk
import pytest

from bake.assets_image import registry_digest
from bake.manifest import load_manifest
from bake.seal import alias_links
from tests.engines import second_engine
from tests.registries import REGISTRY as SHARED_REGISTRY
from tests.registries import LocalRegistry, remove_images_named

from . import REPO, fail_or_skip, required_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]

STANDIN = REPO / "docker/examples/vllm"
WRAPPER = ".buildkite/scripts/ci-bake-rocm.sh"
DOCKERFILE = "docker/Dockerfile.rocm"
MANIFEST = "docker/bake-assets.toml"
# The repositories the committed stand-in names; each test run points them at its own.
COMMITTED = "127.0.0.1:5000/vllm-standin"
BASE = "local/rocm-standin:bookworm"
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]
PIN = re.compile(r"\S+:(?P<tag>[0-9a-f]{64})@sha256:[0-9a-f]{64}")
# The stamp ci_base's stand-in source builds write when they run (Dockerfile.rocm).
HEAVY_STAMP = "/opt/ci-base/source-builds-ran-at"
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
)
# A second vocab in the vllm group: the manifest change of the history.
CL100K = """
[[asset]]
name = "cl100k_base"
path = "tiktoken/9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
sha256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
size = 1681126
urls = ["https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"]
groups = ["vllm"]
"""
# The job a GPU agent runs in the artifact-only flow: install the exported wheel into ci_base, run.
ASSEMBLE = (
    'python3 -m zipfile -e /wheels/vllm-0.0.0+standin-py3-none-any.whl "$(python3 -c '
    "'import site; print(site.getsitepackages()[0])')\" && exec python3 -m vllm.assets_job"
)


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, (
        f"{' '.join(proc.args[:6])} … exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    return proc


def bake(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "bake", *args], cwd, env)


def registry_json(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def layers(ref: str) -> list[tuple[str, str]]:
    """(diff-ID, blob digest) of each layer of ``ref`` (``host/name[:tag][@digest]``), from the registry."""
    host, _, rest = ref.partition("/")
    name, _, which = rest.partition("@")
    if ":" in name.rsplit("/", 1)[-1]:  # a tag: the digest decides when there is one
        name, _, tag = name.rpartition(":")
        which = which or tag
    base = f"http://{host}/v2/{name}"
    manifest = registry_json(f"{base}/manifests/{which}")
    config = registry_json(f"{base}/blobs/{manifest['config']['digest']}")
    return list(
        zip(config["rootfs"]["diff_ids"], [layer["digest"] for layer in manifest["layers"]], strict=True)
    )


@dataclass
class Site:
    """A copy of the stand-in, as vLLM's checkout, pointed at repositories of this run."""

    root: Path
    prefix: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def assets_repo(self) -> str:
        return f"{self.prefix}/bake-assets"

    @property
    def runtime_repo(self) -> str:
        return f"{self.prefix}/bake-runtime"

    def commit(self, message: str) -> None:
        """Commit every change: the wrapper builds HEAD's tree and refuses what is not in it."""
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "-m", message)

    def publish_and_pin(self) -> tuple[list[str], str]:
        """``bake publish`` both images, ``bake pin`` Dockerfile.rocm to them, commit; return both outputs.

        The assets' is ``publish``'s stdout, a line per unit, the index and the whole image."""
        selection = ["--manifest", MANIFEST, "--repository", self.assets_repo, "--group", "vllm"]
        out = ok(bake("publish", *selection, *HOST_NETWORK, cwd=self.root, env=self.env)).stdout
        assets = out.splitlines()
        runtime = ok(bake("publish", "--runtime", "--repository", self.runtime_repo, *HOST_NETWORK,
                          cwd=self.root, env=self.env)).stdout.strip()  # fmt: skip
        ok(bake("pin", *selection, DOCKERFILE, cwd=self.root, env=self.env))
        ok(
            bake(
                "pin", "--runtime", "--repository", self.runtime_repo, DOCKERFILE, cwd=self.root, env=self.env
            )
        )
        self.commit("bake pin")
        return assets, runtime

    def wrapper(self, target: str, **env: str) -> subprocess.CompletedProcess[str]:
        return run([str(self.root / WRAPPER), target], self.root, {**self.env, **env})

    def block_lines(self) -> int:
        """How many lines the block in ci_base holds now: one per unit, and the index's."""
        return sum(
            f"--from={self.assets_repo}" in line for line in (self.root / DOCKERFILE).read_text().splitlines()
        )

    def ci_base(self) -> str:
        """The published ci_base, by digest: ``repo@sha256:…``."""
        tag = self.env["CI_BASE_IMAGE_TAG"]
        digest = registry_digest(tag)
        assert digest, f"{tag} is not in the registry"
        return f"{tag.rsplit(':', 1)[0]}@{digest}"


def git(root: Path, *args: str) -> str:
    return ok(run(["git", "-c", "user.name=ci", "-c", "user.email=ci@127.0.0.1", *args], root, {})).stdout


def make_site(tmp: Path, prefix: str) -> Site:
    """A git checkout of the stand-in, its pins pointed at ``prefix``, committed."""
    root = tmp / "vllm"
    shutil.copytree(STANDIN, root)
    dockerfile = root / DOCKERFILE
    dockerfile.write_text(dockerfile.read_text().replace(COMMITTED, prefix))
    git(root, "init", "-q")
    env = {
        "BUILDKITE": "true",
        "ASSET_MIRRORS": required_env("ASSET_MIRRORS"),
        "BAKE_FETCH_ARGS": "--no-origin",
        "FETCH_IMAGE": BASE,
        "BASE_IMAGE": BASE,
        "CI_BASE_IMAGE_TAG": f"{prefix}/ci_base:latest",
        "IMAGE_TAG": f"{prefix}/test:commit",
    }
    site = Site(root, prefix, env)
    site.commit("the stand-in")
    return site


# Every image this module leaves in the engine names RUN (its tags, or its repository).
RUN = f"bake-vllm-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def site(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield make_site(tmp_path_factory.mktemp("site"), f"{SHARED_REGISTRY}/{RUN}")
    remove_images_named(RUN)


@dataclass
class Step:
    """One CI run of the history: what the wrapper said and did, and the ci_base it left."""

    hash: str
    built: bool
    ci_base: str
    log: str
    block: int  # the lines of the block ci_base was built with: its top layers, under the runtime's

    def asset_layers(self) -> list[tuple[str, str]]:
        """(diff-ID, blob) of the block's layers in ci_base: the ones right under the runtime, the last."""
        return layers(self.ci_base)[-(self.block + 1) : -1]


@dataclass
class History:
    assets_v1: list[str]  # publish's stdout
    steps: dict[str, Step]
    stale_check: subprocess.CompletedProcess[str]
    digest_v1: str
    test_image_v1: str
    plain_image_v1: str
    stamps: dict[str, str]  # HEAVY_STAMP in each step's ci_base
    rawjson: list[dict]  # the manifest change's plain ci_base build, as BuildKit recorded each step


def ci_run(site: Site) -> Step:
    proc = ok(site.wrapper("ci-base-rocm-ci"))
    found = re.search(r"ci_base content hash: ([0-9a-f]{64})", proc.stderr)
    assert found, proc.stderr[-2000:]
    built = "skipping the build" not in proc.stderr
    return Step(found.group(1), built, site.ci_base(), proc.stderr, site.block_lines())


@pytest.fixture(scope="module")
def history(site: Site) -> History:
    """v1; unchanged; requirements changed; manifest changed (checked stale, then published and pinned)."""
    assets_v1, _ = site.publish_and_pin()
    steps = {"v1": ci_run(site)}
    digest_v1 = PIN.fullmatch(assets_v1[-1].split()[-1]).group("tag")
    # The per-commit test image, and an image built with plain docker buildx bake: no wrapper, no label.
    ok(site.wrapper("test-rocm-ci", CI_BASE_IMAGE=steps["v1"].ci_base))
    plain = f"{RUN}-plain:latest"
    bake_file = ["docker", "buildx", "bake", "-f", "docker/docker-bake-rocm.hcl"]
    ok(run([*bake_file, "--set", f"ci-base-rocm.tags={plain}", "ci-base-rocm"], site.root, site.env))
    steps["unchanged"] = ci_run(site)
    requirements = site.root / "requirements/rocm.txt"
    requirements.write_text(requirements.read_text() + "numpy\n")
    site.commit("requirements")
    steps["requirements"] = ci_run(site)
    plain_ci_base = [*bake_file, "--set", f"ci-base-rocm.tags={plain}-2", "ci-base-rocm"]
    ok(run(plain_ci_base, site.root, site.env))  # the plain build's cache, before the manifest change
    manifest = site.root / MANIFEST
    manifest.write_text(manifest.read_text() + CL100K)
    site.commit("the manifest")
    selection = ["--manifest", MANIFEST, "--repository", site.assets_repo, "--group", "vllm"]
    ok(bake("publish", *selection, *HOST_NETWORK, cwd=site.root, env=site.env))
    stale = bake("pin", "--check", *selection, DOCKERFILE, cwd=site.root, env=site.env)
    steps["manifest, not pinned"] = ci_run(site)
    site.publish_and_pin()
    steps["manifest"] = ci_run(site)
    # The plain bake file's ci_base again, now with the manifest change: BuildKit's own record of it.
    record = ok(run([*plain_ci_base, "--progress=rawjson"], site.root, site.env))
    rawjson = [json.loads(line) for line in record.stderr.splitlines() if line.startswith("{")]
    stamps = {name: read_file(step.ci_base, HEAVY_STAMP) for name, step in steps.items()}
    return History(assets_v1, steps, stale, digest_v1, site.env["IMAGE_TAG"], plain, stamps, rawjson)


def read_file(ref: str, path: str) -> str:
    """A file of ``ref`` (``repo@digest``, pulled into the engine), read with the entrypoint bypassed."""
    engine = docker_sdk.from_env(timeout=600)
    repo, _, digest = ref.partition("@")
    engine.images.pull(repo, tag=digest)
    out = engine.containers.run(ref, ["cat", path], entrypoint=[], network_mode="none", remove=True)
    return out.decode()


# ---- the wrapper's hash, and what it builds ----------------------------------------------------


@pytest.fixture
def checkout(tmp_path: Path) -> Site:
    """A committed checkout of the stand-in, for the wrapper's print-only runs (no image, no build)."""
    site = make_site(tmp_path, f"{SHARED_REGISTRY}/bake-vllm-unpublished-{uuid.uuid4().hex[:10]}")
    site.env.update(BAKE_PRINT_ONLY="1", CI_BASE_IMAGE_TAG=f"{site.prefix}/ci_base:latest")
    return site


def content_hash(site: Site) -> str:
    proc = ok(site.wrapper("ci-base-rocm-ci"))
    return re.search(r"ci_base content hash: ([0-9a-f]{64})", proc.stderr).group(1)


# What leaves the hash as it is (vLLM's wrapper hashes no line before the first FROM, and no Docker
# Bake file), and what moves it: (file, the text an edit replaces, what replaces it, hash unchanged).
CI_BASE_FROM = "FROM mori_base AS ci_base\n"
EDITS = {
    "a line before the first FROM": (
        DOCKERFILE,
        "ARG COMMON_WORKDIR=/app\n",
        "# bake:\nARG COMMON_WORKDIR=/app\n",
        True,
    ),
    "the Docker Bake file": (
        "docker/docker-bake-rocm.hcl",
        'group "default"',
        '# edited\ngroup "default"',
        True,
    ),
    "the CI overlay": ("docker/ci-rocm.hcl", 'target "_ci-rocm"', '# edited\ntarget "_ci-rocm"', True),
    "a line of ci_base": (DOCKERFILE, CI_BASE_FROM, f"{CI_BASE_FROM}RUN --network=none true\n", False),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_hash_follows_the_stages_text_only(checkout: Site, edit: str) -> None:
    path, old, new, same = EDITS[edit]
    before = content_hash(checkout)
    target = checkout.root / path
    assert target.read_text().count(old) == 1, f"{path} no longer has {old!r} once"
    target.write_text(target.read_text().replace(old, new))
    checkout.commit(edit)
    assert (content_hash(checkout) == before) is same, f"{edit} {'moved' if same else 'left'} the hash"


# What HEAD's tree would lack: the wrapper stops, naming it and what to do.
DIRTY = {
    "an uncommitted bake pin": ("tracked changes not committed", f"M\t{DOCKERFILE}"),
    "a staged change": ("staged changes", f"M\t{DOCKERFILE}"),
    "an untracked file": ("untracked files", "docker/bake-assets.new.toml"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dirt", sorted(DIRTY))
def test_the_wrapper_refuses_what_heads_tree_would_lack(checkout: Site, dirt: str) -> None:
    what, named = DIRTY[dirt]
    if dirt == "an untracked file":
        (checkout.root / named).write_text("")
    else:
        dockerfile = checkout.root / DOCKERFILE
        dockerfile.write_text(dockerfile.read_text().replace(checkout.prefix, f"{checkout.prefix}-repinned"))
        if dirt == "a staged change":
            git(checkout.root, "add", DOCKERFILE)
    proc = checkout.wrapper("ci-base-rocm-ci")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert (
        f"ci-bake-rocm.sh: {what}, which the build context (the git tree of HEAD) would lack" in proc.stderr
    )
    assert named in proc.stderr and "git commit" in proc.stderr, proc.stderr
    assert "ci_base content hash" not in proc.stderr, "it hashed a tree it would not build"


def test_an_unchanged_tree_skips_the_build(history: History) -> None:
    v1, again = history.steps["v1"], history.steps["unchanged"]
    assert v1.built and not again.built, again.log[-2000:]
    assert (again.hash, again.ci_base) == (v1.hash, v1.ci_base)


def test_a_requirements_change_rebuilds_ci_base_with_the_same_asset_layer(history: History) -> None:
    v1, v2 = history.steps["v1"], history.steps["requirements"]
    assert v2.built and v2.hash != v1.hash and v2.ci_base != v1.ci_base
    # --group vllm: one unit (the vocab) and the index, the same layers (diff-IDs and blobs) in both.
    assert v1.block == 2 and v2.asset_layers() == v1.asset_layers()


def test_a_manifest_change_needs_publish_and_pin_then_rebuilds_ci_base(history: History) -> None:
    before, unpinned, after = (history.steps[k] for k in ("requirements", "manifest, not pinned", "manifest"))
    # The manifest is no input of the wrapper: until the pin moves, ci_base stays (and pin --check fails).
    assert not unpinned.built and unpinned.hash == before.hash
    assert after.built and after.hash != before.hash
    # The block grew by the new vocab's unit, the first unit kept its layer, the index changed.
    old, new = before.asset_layers(), after.asset_layers()
    assert after.block == 3 and new[0] == old[0] and new[-1] != old[-1] and old[-1] not in new


def test_a_manifest_change_reruns_none_of_ci_bases_slow_steps(history: History) -> None:
    # The stand-in source builds' stamp: written at v1, never again (they sit under the block).
    assert len(set(history.stamps.values())) == 1, history.stamps
    # BuildKit's own record of the plain ci_base build after the manifest change.
    steps: dict[str, bool] = {}
    for record in history.rawjson:
        for vertex in record.get("vertexes") or []:
            name = vertex.get("name", "")
            if "[ci_base " in name:
                steps[name] = steps.get(name, False) or bool(vertex.get("cached"))
    slow = {name: cached for name, cached in steps.items() if HEAVY_STAMP in name or "deepep.txt" in name
            or "requirements/rocm.txt" in name}  # fmt: skip
    assert len(slow) == 3 and all(slow.values()), steps
    # The build took the change: the new unit's line is among its steps. (Whether that step ran or
    # came from the cache depends on the engine: a unit is content-addressed, so an engine that built
    # this unit before, in an earlier run, finds it cached; the slow steps above are what must not run.)
    assert any("unit-asset.cl100k_base-" in name for name in steps), steps


def test_pin_check_fails_a_stale_pin_naming_the_line(history: History, site: Site) -> None:
    proc = history.stale_check
    line = next(n for n, text in enumerate(STANDIN.joinpath(DOCKERFILE).read_text().splitlines(), 1)
                if f"--from={COMMITTED}/bake-assets" in text)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    # The placeholder became the vocab's line and the index's; the vocab is unchanged.
    index_v1 = history.assets_v1[-2].split()[-1]
    assert f"{DOCKERFILE}:{line + 1}: {index_v1} → {site.assets_repo}:index-" in proc.stderr
    assert (
        f"{DOCKERFILE}:{line + 1}: no line for unit asset.cl100k_base → {site.assets_repo}:unit-"
        in proc.stderr
    )
    assert f"{DOCKERFILE}:{line}:" not in proc.stderr


# ---- the digests agree, and bake.testing passes ------------------------------------------------


def read_lock(client: docker_sdk.DockerClient, ref: str) -> dict:
    repo, _, digest = ref.partition("@")
    if digest:
        client.images.pull(repo, tag=digest)
    out = client.containers.run(ref, ["cat", "/opt/bake/assets/bake.lock.json"], entrypoint=[],
                                network_mode="none", remove=True)  # fmt: skip
    return json.loads(out)


@pytest.fixture(scope="module")
def client(image: str) -> docker_sdk.DockerClient:
    return docker_sdk.from_env(timeout=600)


def test_the_test_image_its_ci_base_and_the_lock_agree_on_the_digest(
    history: History, site: Site, client: docker_sdk.DockerClient
) -> None:
    ci_base = history.steps["v1"].ci_base
    client.images.pull(history.test_image_v1)
    digests = {which: read_lock(client, ref)["manifest_digest"]
               for which, ref in (("ci_base", ci_base), ("test image", history.test_image_v1))}  # fmt: skip
    assert digests == {"ci_base": history.digest_v1, "test image": history.digest_v1}
    assert set(history.steps["v1"].asset_layers()) <= set(layers(history.test_image_v1))
    assert layers(history.test_image_v1)[: len(layers(ci_base))] == layers(ci_base)
    # No digest label anywhere: the digest is what the layer's own lock says.
    for ref in (ci_base, history.test_image_v1):
        assert "dev.bake.assets.manifest-digest" not in (client.images.get(ref).labels or {})


@pytest.mark.parametrize("which", ["ci_base", "test image", "plain docker buildx bake"])
def test_bake_testing_passes(history: History, which: str, tmp_path: Path) -> None:
    ref = {
        "ci_base": history.steps["v1"].ci_base,
        "test image": history.test_image_v1,
        "plain docker buildx bake": history.plain_image_v1,
    }[which]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "bake.testing", "--bake-image", ref,
         "-p", "no:cacheprovider", "-q", "-rs"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
        env={k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert (
        " passed" in proc.stdout and "not applicable: no dev.bake.assets.manifest-digest label" in proc.stdout
    )


# ---- no cache leak ---------------------------------------------------------------------------


def test_removing_bakes_lines_leaves_no_asset_even_right_after_a_build_with_them(
    history: History, site: Site, client: docker_sdk.DockerClient, tmp_path: Path
) -> None:
    leak = Site(tmp_path / "vllm", site.prefix, site.env)
    shutil.copytree(site.root, leak.root)
    tag = f"{RUN}-leak:latest"
    build = [
        "docker",
        "buildx",
        "bake",
        "-f",
        "docker/docker-bake-rocm.hcl",
        "--set",
        f"ci-base-rocm.tags={tag}",
        "ci-base-rocm",
    ]
    probe = [
        "sh",
        "-c",
        "find /opt/bake /usr/local/bin/tini /usr/local/bin/bake-entrypoint 2>/dev/null; true",
    ]
    try:
        ok(run(build, leak.root, leak.env))
        with_lines = client.containers.run(
            tag, probe, entrypoint=[], network_mode="none", remove=True
        ).decode()
        assert "/opt/bake/assets/bake.lock.json" in with_lines
        dockerfile = leak.root / DOCKERFILE
        lines = dockerfile.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith("# bake:") and site.prefix not in line
                and not line.startswith('ENTRYPOINT ["tini", "--", "bake-entrypoint"]')]  # fmt: skip
        copies = sum(site.prefix in line for line in lines)
        assert copies == leak.block_lines() + 1 and len(lines) - len(kept) == copies + 3, (
            "two comments, the COPY lines (the block's, the runtime's), the ENTRYPOINT"
        )
        dockerfile.write_text("".join(kept))
        assert "bake" not in dockerfile.read_text().split("AS ci_base", 1)[1].split("FROM ", 1)[0]
        ok(run(build, leak.root, leak.env))
        without = client.containers.run(tag, probe, entrypoint=[], network_mode="none", remove=True).decode()
        assert without == "", f"assets or bake's runtime leaked into the image from the cache: {without}"
    finally:
        client.images.remove(tag, force=True)


# ---- every other target builds without bake's images -------------------------------------------

# What CI builds through the wrapper, and the plain bake file's own targets.
WRAPPED = [
    "test-rocm-ci",
    "smoke-test-rocm-ci",
    "csrc-rocm-ci",
    "rust-rocm-ci",
    "nixl-rocm-ci",
    "rocshmem-rocm-ci",
    "deepep-rocm-ci",
    "kernel-symbol-map-rocm",
    "export-wheel-rocm",
    "test-rocm-ci-with-artifacts",
]
PLAIN = ["test-rocm", "final-rocm", "export-wheel-rocm"]


def absent_copy(site: Site, history: History, tmp: Path) -> Site:
    """A copy of the site pinned to repositories that were never pushed (same tags and digests)."""
    copy = Site(tmp / "vllm", site.prefix, {**site.env, "CI_BASE_IMAGE": history.steps["v1"].ci_base})
    shutil.copytree(site.root, copy.root)
    dockerfile = copy.root / DOCKERFILE
    never = f"{SHARED_REGISTRY}/bake-vllm-never-pushed-{uuid.uuid4().hex[:10]}"
    dockerfile.write_text(dockerfile.read_text().replace(site.prefix, never))
    copy.commit("pins to a repository never pushed")
    return copy


def stopped_copy(site: Site, history: History, tmp: Path) -> Site:
    """A copy of the site pinned to images in a registry of its own, which is then stopped."""
    (tmp / "registry").mkdir()
    try:
        own = LocalRegistry(tmp / "registry").__enter__()
    except FileNotFoundError as exc:
        fail_or_skip(str(exc))
    try:
        copy = Site(
            tmp / "vllm", f"{own.host}/vllm", {**site.env, "CI_BASE_IMAGE": history.steps["v1"].ci_base}
        )
        shutil.copytree(site.root, copy.root)
        dockerfile = copy.root / DOCKERFILE
        dockerfile.write_text(dockerfile.read_text().replace(site.prefix, copy.prefix))
        copy.publish_and_pin()
    finally:
        own.__exit__()  # stopped by its pid; the shared registry, which holds ci_base, stays up
    return copy


@pytest.fixture(scope="module", params=["registry stopped", "assets image absent"])
def unreachable(
    request: pytest.FixtureRequest, history: History, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> Site:
    """A copy of the site whose pins bake's images cannot serve: their registry stopped, or never had them."""
    make = stopped_copy if request.param == "registry stopped" else absent_copy
    return make(site, history, tmp_path_factory.mktemp("unreachable"))


@pytest.mark.parametrize("target", WRAPPED)
def test_every_ci_target_but_ci_base_builds_without_bakes_images(unreachable: Site, target: str) -> None:
    ok(unreachable.wrapper(target, IMAGE_TAG=f"{unreachable.env['IMAGE_TAG']}-{uuid.uuid4().hex[:6]}"))


@pytest.mark.parametrize("target", PLAIN)
def test_every_plain_target_builds_without_bakes_images(unreachable: Site, target: str) -> None:
    tags = (
        []
        if target == "export-wheel-rocm"
        else ["--set", f"{target}.tags={RUN}-{target}:{uuid.uuid4().hex[:6]}"]
    )
    bake_file = ["docker", "buildx", "bake", "-f", "docker/docker-bake-rocm.hcl"]
    ok(run([*bake_file, *tags, target], unreachable.root, unreachable.env))


def test_ci_base_alone_needs_the_assets_image(site: Site, history: History, tmp_path: Path) -> None:
    copy = absent_copy(site, history, tmp_path)
    proc = copy.wrapper("ci-base-rocm-ci")
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "bake-vllm-never-pushed" in proc.stderr and "not found" in proc.stderr, proc.stderr[-3000:]


# ---- the agent's pull ----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["classic", "containerd"])
def fresh_engine(
    request: pytest.FixtureRequest, image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[docker_sdk.DockerClient]:
    """A second dockerd with its own, empty data root, with the classic or the containerd image store
    (``engine.store`` says which)."""
    dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if dockerd is None:
        fail_or_skip("dockerd is not installed; run scripts/toolchain.sh up")
    with second_engine(dockerd, tmp_path_factory.mktemp("engine"), request.param, "bake-vllm") as engine:
        engine.client.store = request.param
        yield engine.client


def pull_states(engine: docker_sdk.DockerClient, ref: str) -> dict[str, list[str]]:
    """Pull ``ref`` (``repo@digest``); return every layer's progress states, by short blob digest."""
    repo, digest = ref.split("@")
    states: dict[str, list[str]] = {}
    for record in engine.api.pull(repo, tag=digest, stream=True, decode=True):
        assert "error" not in record, record
        if "id" in record and "status" in record:
            states.setdefault(record["id"], []).append(record["status"])
    return states


def test_an_agent_pulls_ci_base_v2_without_the_asset_layers_again_on_the_containerd_store(
    history: History, fresh_engine: docker_sdk.DockerClient
) -> None:
    """A requirements change, pulled by an agent that has v1. The block sits above the requirements, so the
    containerd store (blobs by digest) fetches no asset blob, while the classic store, which re-pulls every
    layer above a changed one, fetches them again: the trade docs/building.md states."""
    v1, v2 = history.steps["v1"], history.steps["requirements"]
    assert fresh_engine.images.list() == []  # nothing cached: every layer comes from the registry
    shorts = [blob.removeprefix("sha256:")[:12] for _, blob in v2.asset_layers()]
    first = pull_states(fresh_engine, v1.ci_base)
    assert all(first.get(short) for short in shorts), first
    second = pull_states(fresh_engine, v2.ci_base)
    fetched = {
        short: second.get(short, []) for short in shorts if "Download complete" in second.get(short, [])
    }
    if fresh_engine.store == "containerd":
        assert fetched == {}, f"asset blobs fetched again: {fetched}"
    else:
        assert set(fetched) == set(shorts), (
            f"the classic store re-pulls the layers above a changed one: {second}"
        )
    assert any("Download complete" in s for k, s in second.items() if k not in shorts), (
        "v2 brought nothing new"
    )


def test_an_artifact_only_job_on_the_fresh_engine_gets_its_assets_offline(
    history: History, site: Site, fresh_engine: docker_sdk.DockerClient
) -> None:
    ok(site.wrapper("test-rocm-ci-with-artifacts"))
    ci_base = history.steps["manifest"].ci_base
    pull_states(fresh_engine, ci_base)
    output = fresh_engine.containers.run(
        ci_base, ["sh", "-c", ASSEMBLE], network_mode="none", remove=True,
        volumes={str(site.root / "wheel-export"): {"bind": "/wheels", "mode": "ro"}},
    )  # fmt: skip
    report = json.loads(output.decode().strip().splitlines()[-1])
    baked = load_manifest(site.root / MANIFEST)
    vocabs = {PurePosixPath(a.path).name: a.sha256 for a in baked}
    assert len(vocabs) == 2  # the manifest change added cl100k_base
    # Each job-local cache is one copy, as links, of the image's tiktoken/: each vocab, and the
    # <encoding>.tiktoken alias link beside it.
    aliases = {PurePosixPath(link).name: vocabs[target] for link, target in alias_links(baked).items()}
    served = {**vocabs, **aliases}
    assert report == {
        "vllm": "0.0.0+standin",
        "found": {"s3tokenizer": {}, "TIKTOKEN_RS_CACHE_DIR": served, "TIKTOKEN_CACHE_DIR": served},
    }

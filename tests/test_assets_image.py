"""``bake build --assets-image``: digest tag, registry check, publish then consume, with a fake docker.

The real thing (a registry, a wiped builder, a second bake file) runs in scripts/bench.py
(tests/test_bench.py runs its smoke version).
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from bake import cli
from bake.assets_image import AssetsImage, check_repo, registry_digest, resolve
from bake.build import run_build
from bake.errors import BuildError, UsageError
from bake.manifest import load_manifest, manifest_digest, parse_manifest, select
from bake.publish import Selection, publish_selection, selection_of
from tests.isolation import isolate_git
from tests.registries import (
    PASSWORD,
    REGISTRY,
    USER,
    AuthRegistry,
    docker_login,
    has_manifest,
    push_manifest,
    tree_writer,
)
from tests.runners import bake, git

REPO = "127.0.0.1:5000/bake-assets"
SHA_A = "a" * 64
SHA_B = "b" * 64
MANIFEST = textwrap.dedent(
    f"""\
    [[asset]]
    name = "checkpoint"
    path = "s3tokenizer/speech_tokenizer_v3_25hz.onnx"
    sha256 = "{SHA_A}"
    size = 10
    urls = ["https://www.modelscope.cn/checkpoint.onnx"]
    groups = ["omni"]

    [[asset]]
    name = "o200k_base"
    path = "tiktoken/fb374d419588a4632f3f557e76b4b70aebbca790"
    sha256 = "{SHA_B}"
    urls = ["https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"]
    groups = ["vllm", "omni"]
    """
)

PROJECT_DOCKERFILE = """\
FROM scratch AS image
# the asset layers
COPY --link --from=assets / /
"""

FAKE_DOCKER = """\
import json, os, sys
from pathlib import Path

state = Path(os.environ["FAKE_DOCKER_STATE"])
args = sys.argv[1:]
with open(state / "calls.jsonl", "a") as log:
    log.write(json.dumps({"argv": args, "cwd": os.getcwd()}) + "\\n")
if args[:2] == ["buildx", "bake"] and "--print" in args:
    definition = state / "definition.json"
    if not definition.exists():
        sys.exit("ERROR: failed to find target definitions")
    sys.stdout.write(definition.read_text())
elif args[:2] == ["buildx", "bake"]:
    exports = [a.split("dest=", 1)[1] for a in args if ".output=type=tar,dest=" in a]
    code = int((state / "publish-exit").read_text()) if exports else 0
    if exports and code == 0:  # what the assets stage's export holds: a file at each asset's path
        import io, tarfile
        with tarfile.open(exports[0], "w") as tar:
            for name in os.environ["FAKE_DOCKER_FILES"].split():
                info = tarfile.TarInfo(f"opt/bake/assets/{name}")
                info.size = len(name)
                tar.addfile(info, io.BytesIO(name.encode()))
    for arg in args:  # the Dockerfile a consuming build reads, kept for the test
        if ".dockerfile=" in arg:
            (state / "consumed.Dockerfile").write_text(Path(arg.split("=", 1)[1]).read_text())
    sys.exit(code)
else:
    sys.exit(99)
"""


class FakeDocker:
    """Controls and records the fake ``docker`` on PATH."""

    def __init__(self, state: Path) -> None:
        self.state = state

    def define(self, targets: dict[str, dict]) -> None:
        (self.state / "definition.json").write_text(json.dumps({"target": targets}))

    def publish_exit(self, code: int) -> None:
        (self.state / "publish-exit").write_text(str(code))

    def consumed(self) -> str:
        """The Dockerfile the last consuming build read."""
        return (self.state / "consumed.Dockerfile").read_text()

    def calls(self) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line)["argv"] for line in path.read_text().splitlines()]


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    bin_dir = tmp_path / "fake-bin"
    state = tmp_path / "fake-state"
    bin_dir.mkdir()
    state.mkdir()
    script = bin_dir / "docker"
    script.write_text(f"#!{sys.executable}\n{FAKE_DOCKER}")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(state))
    monkeypatch.setenv(
        "FAKE_DOCKER_FILES", " ".join(a.path for a in parse_manifest(MANIFEST)) + " bake.lock.json"
    )
    fake = FakeDocker(state)
    fake.publish_exit(0)
    return fake


def image_target(
    manifest: str = "docker/assets.toml", groups: str = "", digest: str = "", **extra: object
) -> dict:
    """A resolved target as `docker buildx bake --print` shows one built from docker/Dockerfile."""
    target = {
        "context": ".",
        "dockerfile": "docker/Dockerfile",
        "target": "image",
        "args": {"ASSET_MANIFEST": manifest, "ASSET_GROUPS": groups, "ASSET_DIGEST": digest},
    }
    target.update(extra)
    return target


def digest_of(path: Path, groups: str = "") -> str:
    return manifest_digest(select(load_manifest(path), groups.split()))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed build context holding the manifest at docker/assets.toml, with an isolated git."""
    isolate_git(tmp_path, monkeypatch)
    root = tmp_path / "project"
    (root / "docker").mkdir(parents=True)
    (root / "docker/assets.toml").write_text(MANIFEST)
    (root / "docker/Dockerfile").write_text(PROJECT_DOCKERFILE)
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        git(root, *cmd)
    return root


# ---- the repository argument ---------------------------------------------------------------------


@pytest.mark.parametrize("repo", [REPO, "registry.example/rocm-ci/bake-assets", "bake-assets"])
def test_a_repository_without_tag_is_accepted(repo: str) -> None:
    assert check_repo(repo) == repo


@pytest.mark.parametrize(
    ("repo", "says"),
    [
        (f"{REPO}:v1", "without a tag or digest"),
        (f"{REPO}@sha256:{SHA_A}", "without a tag or digest"),
        ("", "not a repository name Docker can parse"),
        ("registry.example/", "not a repository name Docker can parse"),
        (" bake-assets", "not a repository name Docker can parse"),
        ("a" * 256, "256 characters, more than 255"),
    ],
    ids=["tag", "digest", "empty", "trailing slash", "space", "256 characters"],
)
def test_a_tag_or_a_malformed_repository_is_a_usage_error(repo: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        check_repo(repo)


# ---- resolving the definition --------------------------------------------------------------------


@pytest.mark.parametrize("groups", ["", "vllm", "omni"])
def test_the_tag_is_the_manifest_digest_of_the_selected_groups(
    project: Path, docker: FakeDocker, groups: str
) -> None:
    docker.define({"image": image_target(groups=groups)})
    image = resolve(project, ["image"], REPO)
    expected = digest_of(project / "docker/assets.toml", groups)
    assert (image.ref, image.digest, image.targets) == (f"{REPO}:{expected}", expected, ("image",))


def test_the_definition_is_printed_with_the_callers_arguments(project: Path, docker: FakeDocker) -> None:
    docker.define({"image": image_target()})
    resolve(project, ["-f", "a.hcl", "--set", "image.args.X=1", "image"], REPO)
    assert docker.calls() == [
        ["buildx", "bake", "-f", "a.hcl", "--set", "image.args.X=1", "image", "--print"]
    ]


def test_the_manifest_is_read_relative_to_the_targets_context(project: Path, docker: FakeDocker) -> None:
    (project / "sub/m").mkdir(parents=True)
    (project / "sub/m/other.toml").write_text(MANIFEST.replace(SHA_A, SHA_B))
    docker.define({"image": image_target(manifest="m/other.toml", context="sub")})
    assert resolve(project, [], REPO).digest == digest_of(project / "sub/m/other.toml")


def test_only_targets_that_pass_a_manifest_consume_the_image(project: Path, docker: FakeDocker) -> None:
    docker.define({"image": image_target(), "docs": {"context": ".", "dockerfile": "docs/Dockerfile"}})
    assert resolve(project, [], REPO).targets == ("image",)


def test_a_pinned_digest_that_agrees_is_accepted(project: Path, docker: FakeDocker) -> None:
    pinned = digest_of(project / "docker/assets.toml")
    docker.define({"image": image_target(digest=pinned)})
    assert resolve(project, [], REPO).digest == pinned


UNSERVABLE = {
    "no consumer": ({"docs": {"context": ".", "dockerfile": "docs/Dockerfile"}}, "none of the targets"),
    "two asset sets": (
        {"image": image_target(groups="vllm"), "omni": image_target(groups="omni")},
        "different asset sets",
    ),
    "pinned digest disagrees": ({"image": image_target(digest="0" * 64)}, "ASSET_DIGEST=" + "0" * 64),
    "remote context": ({"image": image_target(context="https://github.com/x/y.git")}, "local build context"),
}


@pytest.mark.parametrize(("targets", "message"), UNSERVABLE.values(), ids=UNSERVABLE.keys())
def test_a_definition_one_assets_image_cannot_serve_is_a_usage_error(
    project: Path, docker: FakeDocker, targets: dict, message: str
) -> None:
    docker.define(targets)
    with pytest.raises(UsageError, match=message):
        resolve(project, [], REPO)


def test_a_definition_bake_cannot_print_is_a_build_error(project: Path, docker: FakeDocker) -> None:
    with pytest.raises(BuildError, match="failed to find target definitions"):
        resolve(project, [], REPO)


# ---- the registry --------------------------------------------------------------------------------


@pytest.fixture
def registry_repo(engine: None) -> str:
    """A repository of its own on the toolchain's registry, empty at first."""
    return f"{REGISTRY}/bake-test/assets-image-{uuid.uuid4().hex[:12]}"


def test_the_registry_answer_decides(registry_repo: str) -> None:
    ref = f"{registry_repo}:{SHA_A}"
    assert registry_digest(ref) is None
    pushed = push_manifest(ref)
    assert registry_digest(ref) == pushed
    # Another tag of a known repository is missing too.
    assert registry_digest(f"{registry_repo}:{SHA_B}") is None


# ---- the overrides -------------------------------------------------------------------------------


IMAGE = AssetsImage(ref=f"{REPO}:{SHA_A}", digest=SHA_A, targets=("image",))


def test_publishing_exports_the_assets_stage_as_a_tar_checked_by_the_digest(tmp_path: Path) -> None:
    assert IMAGE.export_args(tmp_path) == [
        "--set", "image.target=assets",
        "--set", f"image.output=type=tar,dest={tmp_path}/image.tar",
        "--set", f"image.args.ASSET_DIGEST={SHA_A}",
    ]  # fmt: skip


def test_consuming_builds_from_the_rewritten_dockerfile(tmp_path: Path) -> None:
    # Only the Dockerfile: no label argument, since no label may come from a variable.
    copy = tmp_path / "image.Dockerfile"
    assert IMAGE.consume_args([copy]) == ["--set", f"image.dockerfile={copy}", f"--allow=fs.read={tmp_path}"]


# ---- bake build --assets-image ------------------------------------------------------------------


def bake_runs(docker: FakeDocker) -> list[list[str]]:
    return [c for c in docker.calls() if c[:2] == ["buildx", "bake"] and "--print" not in c]


def push_all(chosen: Selection) -> list[str]:
    """Publish every image of ``chosen`` (each file's bytes its path); return the block's pinned
    references, units then the index."""
    block = publish_selection(chosen, tree_writer({p: p.encode() for u in chosen.units for p in u.paths}))
    return [*(found.pinned for _, found in block.units), block.index.pinned]


def block_of(pins: list[str]) -> str:
    return "".join(f"COPY --link --from={pin} / /\n" for pin in pins)


def test_a_missing_image_is_published_first_then_consumed(
    project: Path, docker: FakeDocker, registry_repo: str
) -> None:
    docker.define({"image": image_target()})
    chosen = selection_of(project / "docker/assets.toml", registry_repo, [])
    assert registry_digest(chosen.whole_ref) is None
    assert run_build(project, ["image"], assets_image=registry_repo) == 0
    export, consume = bake_runs(docker)
    assert export[:3] == ["buildx", "bake", "image"] and "image.target=assets" in export
    assert consume[:3] == ["buildx", "bake", "image"] and consume[4].startswith("image.dockerfile=")
    # Each unit is a line of its own, pinned to what was pushed; then the index.
    pins = [
        f"{ref}@{registry_digest(ref)}" for ref in [*map(chosen.unit_ref, chosen.units), chosen.index_ref]
    ]
    assert len(pins) == 3
    assert docker.consumed() == PROJECT_DOCKERFILE.replace("COPY --link --from=assets / /\n", block_of(pins))


def test_a_present_image_is_only_consumed(project: Path, docker: FakeDocker, registry_repo: str) -> None:
    docker.define({"image": image_target()})
    pins = push_all(selection_of(project / "docker/assets.toml", registry_repo, []))
    assert run_build(project, ["image"], assets_image=registry_repo) == 0
    (consume,) = bake_runs(docker)
    assert consume[4].startswith("image.dockerfile=")
    assert block_of(pins) in docker.consumed()


def test_a_failed_publish_builds_nothing_more(project: Path, docker: FakeDocker, registry_repo: str) -> None:
    docker.define({"image": image_target()})
    docker.publish_exit(1)
    with pytest.raises(BuildError) as caught:
        run_build(project, ["image"], assets_image=registry_repo)
    assert caught.value.exit_code == 5
    assert len(bake_runs(docker)) == 1


def test_a_tagged_repository_fails_before_the_context_check_and_docker(
    tmp_path: Path, docker: FakeDocker
) -> None:
    with pytest.raises(UsageError):
        run_build(tmp_path, ["image"], assets_image=f"{REPO}:latest")  # tmp_path is no git repository
    assert docker.calls() == []


def test_the_cli_option_reaches_the_build(
    project: Path, docker: FakeDocker, registry_repo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker.define({"image": image_target(groups="vllm")})
    pins = push_all(selection_of(project / "docker/assets.toml", registry_repo, ["vllm"]))
    monkeypatch.chdir(project)
    assert cli.main(["build", "--assets-image", registry_repo, "--", "image"]) == 0
    assert bake_runs(docker)[-1][3:5] == ["--set", bake_runs(docker)[-1][4]]
    assert block_of(pins) in docker.consumed() and len(pins) == 2  # --group vllm: the vocab, the index


# ---- the first publish to a registry that answers 401 until you log in -------------------------

FIRST_PUBLISH_DOCKERFILE = """\
# assets: what the real Dockerfile's fetch and verify would leave, here a file at each asset's path
FROM scratch AS assets
COPY docker/tree/ /opt/bake/assets/

# image: takes the asset layers, from this stage or from the published unit images
FROM scratch AS image
COPY --from=assets / /
"""
FIRST_PUBLISH_BAKE = """\
target "image" {
  context = "."
  dockerfile = "docker/Dockerfile"
  target = "image"
  args = { ASSET_MANIFEST = "docker/assets.toml", ASSET_GROUPS = "", ASSET_DIGEST = "" }
  output = ["type=cacheonly"]
}
"""


def test_first_publish_to_a_registry_that_answers_401(
    project: Path, auth_registry: AuthRegistry, docker_config: Path
) -> None:
    """Without a login nothing is built and the message says `docker login`; then publish, then consume."""
    (project / "docker/Dockerfile").write_text(FIRST_PUBLISH_DOCKERFILE)
    (project / "docker-bake.hcl").write_text(FIRST_PUBLISH_BAKE)
    for asset in parse_manifest(MANIFEST):
        (project / "docker/tree" / asset.path).parent.mkdir(parents=True, exist_ok=True)
        (project / "docker/tree" / asset.path).write_text(asset.name)
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "tiny build")
    repo = f"{auth_registry.host}/bake-test/assets"
    ref = f"{repo}:{digest_of(project / 'docker/assets.toml')}"

    refused = bake("build", "--assets-image", repo, "--", "image", cwd=project)
    assert refused.returncode == 5, refused.stderr
    assert f"docker login {auth_registry.host}" in refused.stderr and "Traceback" not in refused.stderr
    assert auth_registry.repositories() == [], "nothing may be built or pushed before the registry answers"

    assert docker_login(auth_registry.host).returncode == 0
    first = bake("build", "--assets-image", repo, "--", "image", cwd=project)
    assert first.returncode == 0, first.stderr
    assert "not in the registry yet" in first.stderr and "bake: pushed" in first.stderr
    assert has_manifest(ref, (USER, PASSWORD))

    second = bake("build", "--assets-image", repo, "--", "image", cwd=project)
    assert second.returncode == 0, second.stderr
    assert f"every unit, the index and the whole of {ref} are in the registry" in second.stderr

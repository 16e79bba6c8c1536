"""``bake publish --sign`` and ``bake pin --verify-key`` end to end: real builds, a loopback registry, cosign.

Each test publishes a small manifest (two units: the checkpoint alone, and the vocab and whisper
files sharing ``layer = "pair"``) into a repository of its own, with a key pair made for the
module, then pins a Dockerfile. Signing skips the transparency log and verifying ignores it
(``--no-tlog``): these machines reach none. What a refused pin must leave: exit 5, the image and
the reason named, and the Dockerfile byte for byte as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bake.attestation import predicate, records_of
from bake.cosign import Cosign
from bake.manifest import load_manifest, manifest_digest
from bake.publish import lookup_block
from bake.signing import sign, subjects_of
from tests.assets import mirror_args, sha256
from tests.baked import DECLARED, FILES, NAMES, S3_PATH, URLS, VOCAB_PATH, WHISPER_PATH
from tests.baked import serve as serve_files
from tests.mirror import Mirror
from tests.registries import REGISTRY, remove_images_named
from tests.runners import REPO
from tests.signed import key_pair, replace_unit, repush

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

STANDIN = "local/rocm-standin:bookworm"
HOST_NETWORK = ["--", "--network=host", "--allow=network.host"]
RUN = f"sign-publish-{uuid.uuid4().hex[:12]}"
PAIR = "layer.pair"


def write_manifest(path: Path, signing: str = "") -> Path:
    """The module's manifest: the checkpoint a unit of its own; the vocab and whisper one unit, "pair"."""
    entries = [f'[[consumer]]\nname = "whisper"\nlocations = ["{DECLARED["whisper"][0]}"]\n']
    for rel, data in FILES.items():
        layer = '\nlayer = "pair"' if rel in (VOCAB_PATH, WHISPER_PATH) else ""
        entries.append(
            f'[[asset]]\nname = "{NAMES[rel]}"\npath = "{rel}"\nsha256 = "{sha256(data)}"\n'
            f'size = {len(data)}\nurls = ["{URLS[rel]}"]{layer}\n'
        )
    path.write_text(signing + "\n".join(entries))
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, engine: None) -> Iterator[tuple[Path, dict[str, str]]]:
    """A directory outside any checkout: the manifest, two key pairs, and an environment that fetches
    from a loopback mirror."""
    workdir = tmp_path_factory.mktemp("signed-site")
    write_manifest(workdir / "assets.toml")
    key_pair(workdir, "bake")
    key_pair(workdir, "other")
    with Mirror() as mirror:
        serve_files(mirror)
        env = {
            "ASSET_MIRRORS": " ".join(mirror_args(mirror.url("/").rstrip("/"))),
            "BAKE_FETCH_ARGS": "--no-origin",
            "FETCH_IMAGE": STANDIN,
            "COSIGN_PASSWORD": "",
        }
        yield workdir, env
    remove_images_named(RUN)


@pytest.fixture
def repository() -> str:
    return f"{REGISTRY}/{RUN}-{uuid.uuid4().hex[:6]}"


def bake(
    site: tuple[Path, dict[str, str]], *args: str, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m bake ARGS`` in the site directory, this checkout on PYTHONPATH."""
    workdir, env = site
    environment = {**os.environ, "PYTHONPATH": str(REPO), **env}
    if path is not None:
        environment["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "bake", *args], cwd=workdir, env=environment,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def publish(site, repository: str, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = bake(
        site, "publish", "--manifest", "assets.toml", "--repository", repository, *extra, *HOST_NETWORK
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def dockerfile(site, repository: str) -> Path:
    path = site[0] / f"Dockerfile.{repository.rsplit('/', 1)[1]}"
    path.write_text(f"FROM {STANDIN}\nRUN true\nCOPY --link --from={repository} / /\n")
    return path


def pin(site, repository: str, target: Path, *extra: str, manifest: str = "assets.toml"):
    return bake(site, "pin", "--manifest", manifest, "--repository", repository, *extra, target.name)


VERIFY = ["--verify-key", "bake.pub", "--no-tlog"]


def refused(proc: subprocess.CompletedProcess[str], target: Path, before: bytes) -> str:
    """Assert a refused pin: exit 5, the Dockerfile as it was; return its stderr."""
    assert proc.returncode == 5, proc.stderr[-4000:]
    assert target.read_bytes() == before, "a refused pin changed the Dockerfile"
    return proc.stderr


def test_publish_signed_then_pin_verified(site, repository: str) -> None:
    first = publish(site, repository, "--sign", "bake.key", "--no-tlog")
    kinds = [" ".join(line.split()[:-1]) for line in first.stdout.splitlines()]
    assert kinds == ["unit asset.speech_tokenizer_v3_25hz", f"unit {PAIR}", "index", "image"]
    assert "signed 4 image(s) with bake.key" in first.stderr
    target = dockerfile(site, repository)
    done = pin(site, repository, target, *VERIFY)
    assert done.returncode == 0, done.stderr[-4000:]
    assert target.read_text().count(f"COPY --link --from={repository}:") == 3  # two units and the index
    assert pin(site, repository, target, "--check", *VERIFY).returncode == 0
    # The same key named by the manifest: CI's plain `bake pin --check` verifies too.
    table = '[signing]\nverify-key = "bake.pub"\ntlog = false\n\n'
    write_manifest(site[0] / "signed.toml", table)
    assert pin(site, repository, target, "--check", manifest="signed.toml").returncode == 0
    write_manifest(site[0] / "other.toml", table.replace("bake.pub", "other.pub"))
    before = target.read_bytes()
    assert "no signature on it verifies with" in refused(
        pin(site, repository, target, manifest="other.toml"), target, before
    )
    again = publish(site, repository, "--sign", "bake.key", "--no-tlog")
    assert again.stdout == first.stdout and "nothing to build" in again.stderr


@pytest.mark.parametrize("whole_too", [False, True], ids=["the unit alone", "the unit and the whole"])
def test_a_unit_pushed_again_with_one_byte_changed_is_refused(site, repository: str, whole_too: bool) -> None:
    publish(site, repository, "--sign", "bake.key", "--no-tlog")
    target = dockerfile(site, repository)
    before = target.read_bytes()
    block = lookup_block(site[0] / "assets.toml", repository, [], "bake publish")
    unit, published = block.units[0]
    changed = bytearray(FILES[S3_PATH])
    changed[100] ^= 1
    if whole_too:  # consistent again: only the signatures can tell
        now, _ = replace_unit(block, 0, {S3_PATH: bytes(changed)})
        stderr = refused(pin(site, repository, target, *VERIFY), target, before)
        assert f"unit {unit.name} {repository}@{now.digest}: it has no signature" in stderr
    else:  # bake.served's check sees the whole list another layer in the unit's place
        repush(published, {S3_PATH: bytes(changed)})
        stderr = refused(pin(site, repository, target, *VERIFY), target, before)
        assert f"{unit.tag}" in stderr


def test_a_signature_by_another_key_is_refused(site, repository: str) -> None:
    publish(site, repository, "--sign", "other.key", "--no-tlog")
    target = dockerfile(site, repository)
    stderr = refused(pin(site, repository, target, *VERIFY), target, target.read_bytes())
    assert "4 of 4 image(s) failed verification with bake.pub" in stderr
    assert f"unit {PAIR} {repository}@" in stderr and "no signature on it verifies with bake.pub" in stderr


def test_an_unsigned_unit_is_refused_and_check_refuses_it_too(site, repository: str) -> None:
    publish(site, repository)
    target = dockerfile(site, repository)
    before = target.read_bytes()
    stderr = refused(pin(site, repository, target, *VERIFY), target, before)
    assert f"unit asset.speech_tokenizer_v3_25hz {repository}@" in stderr and "it has no signature" in stderr
    refused(pin(site, repository, target, "--check", *VERIFY), target, before)


def test_an_attestation_that_omits_a_file_is_refused(site, repository: str, monkeypatch) -> None:
    publish(site, repository)
    manifest = site[0] / "assets.toml"
    block = lookup_block(manifest, repository, [], "bake publish")
    chosen = load_manifest(manifest)
    subjects = subjects_of(block, list(chosen), manifest_digest(chosen))
    pair = next(i for i, s in enumerate(subjects) if s.what == f"unit {PAIR}")
    vocab = [a for a in chosen if a.path == VOCAB_PATH]  # the pair's whisper file left out
    subjects[pair] = replace(
        subjects[pair], predicate=predicate(records_of(vocab), manifest_digest(chosen), unit=PAIR)
    )
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    sign(subjects, Cosign.signer(str(site[0] / "bake.key"), tlog=False))
    target = dockerfile(site, repository)
    stderr = refused(pin(site, repository, target, *VERIFY), target, target.read_bytes())
    assert f"unit {PAIR} {repository}@" in stderr
    assert f"its attestation differs from what is expected: omits {WHISPER_PATH}" in stderr


def test_without_cosign_signing_is_a_usage_error_and_plain_publish_works_as_before(
    site, repository, tmp_path
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "zstd"):  # what a plain publish runs; cosign left out
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    path = str(bin_dir)
    selection = ["--manifest", "assets.toml", "--repository", repository]
    signed = bake(site, "publish", *selection, "--sign", "bake.key", *HOST_NETWORK, path=path)
    assert signed.returncode == 2, signed.stderr
    assert (
        "cosign not found on PATH; install cosign" in signed.stderr and "docker buildx" not in signed.stderr
    )
    plain = bake(
        site, "publish", "--manifest", "assets.toml", "--repository", repository, *HOST_NETWORK, path=path
    )
    assert plain.returncode == 0, plain.stderr[-4000:]
    assert len(plain.stdout.splitlines()) == 4


def test_the_runtime_image_is_signed_and_verified_too(site, repository: str) -> None:
    runtime = ["--runtime", "--repository", repository]
    signed = bake(site, "publish", *runtime, "--sign", "bake.key", "--no-tlog", *HOST_NETWORK)
    assert signed.returncode == 0, signed.stderr[-4000:]
    target = site[0] / f"Dockerfile.runtime-{repository.rsplit('/', 1)[1]}"
    target.write_text(f"FROM {STANDIN}\nCOPY --link --from={repository} / /\n")
    before = target.read_bytes()
    other = bake(site, "pin", *runtime, "--verify-key", "other.pub", "--no-tlog", target.name)
    assert "1 of 1 image(s) failed verification with other.pub" in refused(other, target, before)
    done = bake(site, "pin", *runtime, *VERIFY, target.name)
    assert done.returncode == 0, done.stderr[-4000:]
    assert bake(site, "pin", *runtime, "--check", *VERIFY, target.name).returncode == 0

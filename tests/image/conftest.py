"""Session fixtures for the image tests: the image under test, a testinfra host, the clients image."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker as docker_sdk
import pytest
import testinfra

from bake.testing.image import ImageError, docker_client

from . import MANIFEST, Run, docker, fail_or_skip, required_env, run_image

HERE = Path(__file__).resolve().parent
# Every s3tokenizer checkpoint of the test manifest, as MODEL=SHA256 pairs for clients.Dockerfile.
S3_TEST_TABLE = " ".join(
    f"{Path(a.path).stem}={a.sha256}" for a in MANIFEST if a.path.startswith("s3tokenizer/")
)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="session")
def image() -> str:
    """The tag of the image under test, from BAKE_TEST_IMAGE, once the engine answers and has it."""
    tag = required_env("BAKE_TEST_IMAGE")
    try:
        client = docker_client()
    except ImageError as exc:
        fail_or_skip(f"{exc}; run scripts/toolchain.sh up")
    try:
        client.images.get(tag)
    except docker_sdk.errors.ImageNotFound:
        fail_or_skip(f"BAKE_TEST_IMAGE={tag} is not in the engine; build it with scripts/test.sh")
    return tag


# Dogfood: the plugin's public fixtures (bake_host, bake_lock, bake_run, bake_image_attrs…)
# act on the image under test, so these tests use exactly what other teams use.
@pytest.fixture(scope="session")
def bake_image(image: str) -> str:
    return image


@pytest.fixture(scope="session")
def image_config(bake_image_attrs: dict) -> dict:
    """``docker image inspect`` of the image under test."""
    return bake_image_attrs


@pytest.fixture(scope="session")
def host(bake_host: testinfra.host.Host) -> testinfra.host.Host:
    """A testinfra host on a long-running, offline container of the image (the plugin's bake_host)."""
    return bake_host


@pytest.fixture(scope="session")
def run(image: str) -> Run:
    """``run(*command, **options)``: ``docker run --rm --network none`` the image under test."""
    return functools.partial(run_image, image)


@pytest.fixture(scope="session")
def image_archive(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``docker save`` of the image under test, written once per session and deleted afterwards."""
    archive = tmp_path_factory.mktemp("save") / "image.tar"
    docker("save", "--output", str(archive), image, timeout=600)
    yield archive
    archive.unlink()


@pytest.fixture(scope="session")
def clients_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The image under test plus openai-harmony, tiktoken and s3tokenizer (no torch), removed afterwards.

    s3tokenizer's table is patched to the generated test checkpoints' sha256s, as the
    production table names the real checkpoints'.
    """
    if not CA_BUNDLE.is_file():
        fail_or_skip(f"{CA_BUNDLE} is missing: pip inside the build needs the machine CA to reach PyPI")
    tag = f"bake/rocm-clients:{uuid.uuid4().hex[:12]}"
    context = tmp_path_factory.mktemp("clients-context")
    docker(
        "buildx", "build", "--network=host", "--allow=network.host", "--load",
        "--secret", f"id=ca,src={CA_BUNDLE}",
        "--build-arg", f"IMAGE={image}",
        "--build-arg", f"S3_TEST_TABLE={S3_TEST_TABLE}",
        "--file", str(HERE / "clients.Dockerfile"), "--tag", tag, str(context),
        timeout=900,
    )  # fmt: skip
    yield tag
    docker("rmi", tag, check=False)

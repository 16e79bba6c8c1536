"""Session fixtures for the image tests: the image under test, a testinfra host, the clients image."""

from __future__ import annotations

import functools
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import testinfra

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
    if shutil.which("docker") is None:
        fail_or_skip("no docker client on PATH; run `scripts/toolchain.sh up` as root")
    info = docker("info", "--format", "{{.ServerVersion}}", check=False)
    if info.returncode != 0:
        fail_or_skip(
            f"the Docker engine does not answer ({info.stderr.strip()}); run scripts/toolchain.sh up"
        )
    if docker("image", "inspect", tag, check=False).returncode != 0:
        fail_or_skip(f"BAKE_TEST_IMAGE={tag} is not in the engine; build it with scripts/test.sh")
    return tag


@pytest.fixture(scope="session")
def image_config(image: str) -> dict:
    """``docker image inspect`` of the image under test."""
    return json.loads(docker("image", "inspect", image).stdout)[0]


@pytest.fixture(scope="session")
def host(image: str) -> Iterator[testinfra.host.Host]:
    """A long-running container of the image (tini forwards SIGTERM), as a testinfra host."""
    cid = docker("run", "-d", "--network=none", image, "sleep", "infinity").stdout.strip()
    try:
        yield testinfra.get_host(f"docker://{cid}")
    finally:
        docker("rm", "-f", cid, check=False)


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

"""The image under test, through the docker SDK: its config, its files, and jobs run offline.

docker is imported when an image is opened, never at module import, so that pytest keeps
working where the ``testinfra`` extra is not installed.
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from bake.reference import host_of

DEFAULT_ROOT = "/opt/bake/assets"
# The image's own bake, which the probes import (the path docker/bake.sh uses).
IMAGE_LIB = "/opt/bake/lib"
ROOT_LABEL = "dev.bake.assets.root"
DIGEST_LABEL = "dev.bake.assets.manifest-digest"
# Documents read from the image at collection time are small; refuse anything that is not.
SMALL_FILE = 32 << 20
# Until bake-assets is on PyPI, the extra comes with the wheel the user built.
EXTRA = "pip install 'bake-assets[testinfra]' (or 'WHEEL[testinfra]' for a wheel built with python -m build)"


class ImageError(RuntimeError):
    """The image cannot be used: no engine, no image, no docker SDK. The message says what to do."""


@dataclass(frozen=True)
class JobResult:
    """What a job run through the image's ENTRYPOINT did."""

    exit_code: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        """Return the exit code and both streams, for assertion messages."""
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


def docker_client() -> Any:
    """Return ``docker.from_env()``. Raises ImageError when the SDK or the engine is missing."""
    try:
        import docker
    except ImportError:
        raise ImageError(f"bake.testing needs the docker SDK and pytest-testinfra: {EXTRA}") from None
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageError(f"the Docker engine does not answer ({exc}); start it or set DOCKER_HOST") from None
    return client


def _wait(container: Any, timeout: float) -> int:
    """Return the container's exit code, or kill it and return -1 when it outlives ``timeout``."""
    import requests

    try:
        return container.wait(timeout=timeout)["StatusCode"]
    # container.wait(timeout=…) ends with requests' errors, not the SDK's.
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        container.kill()
        return -1


class NotInEngine(ImageError):
    """The engine lacks the image, and its reference names no registry host to pull it from."""


class ImageUnderTest:
    """One image in the engine, opened by reference.

    It is pulled when the engine lacks it only if the reference names its registry host
    (``registry.example/ci/image:tag``, ``docker.io/library/python:3``): a bare ``name:tag``
    would come from Docker Hub, a namespace anyone can register, so it must be in the engine.
    """

    def __init__(self, ref: str, client: Any | None = None) -> None:
        self.client = client or docker_client()
        import docker

        self.ref = ref
        self.lib = IMAGE_LIB
        try:
            self.image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            if host_of(ref) is None:
                raise NotInEngine(
                    f"{ref}: not in the engine, and bake pulls only an image named with its registry host "
                    f"(this one would come from Docker Hub); build or load it first, or name its host: "
                    f"REGISTRY/{ref}, or docker.io/{ref} for Docker Hub"
                ) from None
            try:
                self.image = self.client.images.pull(ref)
            except docker.errors.DockerException as exc:
                raise ImageError(f"{ref}: not in the engine, and pulling it failed ({exc})") from None
        except docker.errors.DockerException as exc:
            raise ImageError(f"{ref}: cannot inspect it ({exc})") from None

    @property
    def attrs(self) -> dict:
        """``docker image inspect`` of the image."""
        return self.image.attrs

    @property
    def labels(self) -> dict[str, str]:
        return self.attrs.get("Config", {}).get("Labels") or {}

    @property
    def asset_root(self) -> str:
        """The asset root: its label, else ``BAKE_ASSETS`` in the image's environment, else the default."""
        env = dict(e.split("=", 1) for e in self.attrs.get("Config", {}).get("Env") or [] if "=" in e)
        return self.labels.get(ROOT_LABEL) or env.get("BAKE_ASSETS") or DEFAULT_ROOT

    def read_file(self, path: str) -> bytes | None:
        """Return the bytes of a small regular file in the image, or None when it is absent."""
        import docker

        # Never started: the entrypoint only satisfies images that have none (FROM scratch).
        container = self.client.containers.create(self.image.id, entrypoint=["true"], network_mode="none")
        try:
            try:
                chunks, stat = container.get_archive(path)
            except docker.errors.NotFound:
                return None
            if stat["size"] > SMALL_FILE:
                raise ImageError(f"{self.ref}: {path} is {stat['size']} bytes; expected a small document")
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member is not None and member.isfile() else None
                return handle.read() if handle is not None else None
        finally:
            container.remove(force=True)

    def _start(self, command: Sequence[str], **options: Any) -> Any:
        name = f"bake-testing-{uuid.uuid4().hex[:12]}"
        return self.client.containers.run(
            self.image.id, list(command), name=name, network_mode="none", detach=True, **options
        )

    def run(
        self,
        *command: str,
        environment: Mapping[str, str] | None = None,
        timeout: float = 120,
        **options: Any,
    ) -> JobResult:
        """Run ``command`` through the image's ENTRYPOINT with no network; return its exit code and output.

        ``options`` go to ``containers.run`` (``user``, ``volumes``, ``read_only``, ``tmpfs``…).
        """
        container = self._start(command, environment=dict(environment or {}), **options)
        try:
            status = _wait(container, timeout)
            stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
            stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
            if status == -1:
                stderr += f"\nbake.testing: the job did not finish within {timeout} s and was killed"
            return JobResult(status, stdout, stderr)
        finally:
            container.remove(force=True)

    def sigterm(self, job: Sequence[str], ready: str, timeout: float = 30) -> tuple[JobResult, str]:
        """Start ``job`` through the ENTRYPOINT, wait for ``ready`` on its stdout, send SIGTERM.

        Returns the job's result and the command line of PID 1 in the container.
        """
        container = self._start(job)
        try:
            deadline = time.monotonic() + timeout
            while ready not in container.logs(stdout=True, stderr=False).decode(errors="replace"):
                container.reload()
                if container.status == "exited" or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            container.reload()
            pid1 = container.top(ps_args="-o pid,args")["Processes"] if container.status == "running" else []
            init = next((args for pid, args in pid1 if pid == str(container.attrs["State"]["Pid"])), "")
            if container.status == "running":
                container.kill(signal="SIGTERM")
            status = _wait(container, timeout)
            stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
            stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
            return JobResult(status, stdout, stderr), init
        finally:
            container.remove(force=True)

    def start_host(self) -> Any:
        """Start a long-running container for testinfra: ``sleep infinity`` under docker's init, offline.

        It bypasses the ENTRYPOINT on purpose, so file checks do not depend on it.
        """
        return self._start(["infinity"], entrypoint=["sleep"], init=True)

    def save(self) -> Iterator[bytes]:
        """Stream ``docker save`` of the image, chunk by chunk."""
        return self.image.save(chunk_size=1 << 20, named=False)


def parent_dirs(root: str, paths: Sequence[str]) -> list[str]:
    """Return ``root`` and every directory between it and each of ``paths``, sorted."""
    dirs = {root}
    for path in paths:
        for parent in PurePosixPath(path).parents:
            if str(parent) != ".":
                dirs.add(f"{root}/{parent}")
    return sorted(dirs)

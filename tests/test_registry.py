"""bake/registry.py: one repository on a distribution registry, as bake asks it and pushes to it.

Hostile registries (one that lies about a digest, or answers every tag with one image) are
tests/reliability/test_registry_hostile.py's; answers such as 401, 429 and 503 are
tests/reliability/test_assets_image_hostile.py's.
"""

from __future__ import annotations

import hashlib
import io
import threading
import urllib.error
import uuid
from email.message import Message
from pathlib import Path

import pytest

from bake.errors import BuildError
from bake.registry import Registry, concurrently, failure, split_repository
from tests.registries import REGISTRY, push_manifest


@pytest.mark.parametrize(
    ("repository", "split"),
    [
        ("127.0.0.1:5000/bake-test/x", ("127.0.0.1:5000", "bake-test/x")),
        ("registry.example/a/b", ("registry.example", "a/b")),
        ("localhost/x", ("localhost", "x")),
        ("vllm/ci", ("registry-1.docker.io", "vllm/ci")),
        ("ubuntu", ("registry-1.docker.io", "library/ubuntu")),
    ],
)
def test_split_repository_reads_the_host_as_docker_does(repository: str, split: tuple[str, str]) -> None:
    assert split_repository(repository) == split


def test_concurrently_keeps_the_order_and_runs_at_once() -> None:
    threads: set[int] = set()
    barrier = threading.Barrier(
        2, timeout=10
    )  # two items that each wait for the other: only concurrency passes

    def work(item: int) -> int:
        threads.add(threading.get_ident())
        if item < 2:
            barrier.wait()
        return item * 10

    assert concurrently(range(5), work) == [0, 10, 20, 30, 40]
    assert len(threads) >= 2


def test_concurrently_raises_the_first_error() -> None:
    def work(item: int) -> int:
        if item == 3:
            raise ValueError("item 3")
        return item

    with pytest.raises(ValueError, match="item 3"):
        concurrently(range(6), work)


def http_error(code: int, reason: str, body: bytes) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("http://r.example/v2/x", code, reason, Message(), io.BytesIO(body))


def test_a_refused_push_names_the_repository_what_the_registry_said_and_what_to_do() -> None:
    error = failure("r.example/x", http_error(403, "Forbidden", b'{"errors":[{"code":"DENIED"}]}\x1b[2J'))
    assert isinstance(error, BuildError)
    assert str(error) == (
        'pushing to r.example/x failed (403 Forbidden: {"errors":[{"code":"DENIED"}]}\\x1b[2J); '
        "use a repository your account can push to"
    )


def test_an_unreachable_registry_is_said_so() -> None:
    error = failure("r.example/x", urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))
    assert str(error).startswith("pushing to r.example/x failed: the registry could not be reached (")
    assert str(error).endswith("check that it is up and reachable from this machine, then rerun")


@pytest.mark.docker
def test_manifest_is_what_the_registry_serves_and_none_for_a_tag_it_lacks(
    engine: None, docker_config: Path
) -> None:
    repository = f"{REGISTRY}/bake-test/registry-{uuid.uuid4().hex[:10]}"
    digest = push_manifest(f"{repository}:present")
    registry = Registry(repository)
    served = registry.manifest("present")
    assert served is not None and served.digest == digest
    assert served.digest == "sha256:" + hashlib.sha256(served.body).hexdigest()
    assert registry.manifest(digest) == served
    assert registry.manifest("absent") is None

"""Hostile registries against ``bake/registry.py``: the digest is the hash of the bytes the registry
serves. (Round 4, issue 29: finding 5.)"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from bake.publish import selection_of
from tests.baked import write_manifest
from tests.loopback import LoopbackServer
from tests.registries import REGISTRY, push_manifest
from tests.runners import bake

pytestmark = pytest.mark.timeout(120)


# ---- finding 5: the digest is the hash of the bytes the registry serves -----------------------


class LyingRegistry:
    """A loopback front for the toolchain's registry that names every manifest by a digest it is not.

    Each manifest answer carries ``Docker-Content-Digest: LIE``, and a request for LIE gets the
    real manifest, so the lie holds up to any client that does not hash what it was served.
    """

    LIE = "sha256:" + hashlib.sha256(b"not the manifest").hexdigest()

    def __init__(self) -> None:
        self.truth = ""
        self.server = LoopbackServer(self._handler())
        self.host = f"127.0.0.1:{self.server.port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        front = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._forward(send_body=False)

            def do_GET(self) -> None:
                self._forward(send_body=True)

            def _forward(self, send_body: bool) -> None:
                path = self.path.replace(front.LIE, front.truth) if front.truth else self.path
                headers = {"Accept": ", ".join(self.headers.get_all("Accept") or ["*/*"])}
                request = urllib.request.Request(
                    f"http://{REGISTRY}{path}", method=self.command, headers=headers
                )
                try:
                    answer = urllib.request.urlopen(request, timeout=30)
                except urllib.error.HTTPError as exc:
                    answer = exc
                body = answer.read()
                self.send_response(answer.status if hasattr(answer, "status") else answer.code)
                for key, value in answer.headers.items():
                    if key.lower() == "docker-content-digest" and "/manifests/" in path:
                        front.truth = value
                        value = front.LIE
                    if key.lower() not in ("connection", "transfer-encoding", "date", "server"):
                        self.send_header(key, value)
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

        return Handler


@pytest.fixture
def lying_registry(engine: None):
    front = LyingRegistry()
    with front.server:
        yield front


@pytest.mark.docker
def test_a_registry_that_lies_about_the_digest_is_exit_5(
    lying_registry: LyingRegistry, tmp_path: Path
) -> None:
    manifest = write_manifest(tmp_path / "assets.toml")
    name = f"bake-test/lie-{uuid.uuid4().hex[:12]}"
    # Every image of the selection is there (each unit's, the index's, the whole's): only the lie is wrong.
    chosen = selection_of(manifest, f"{REGISTRY}/{name}", [])
    for ref in [*map(chosen.unit_ref, chosen.units), chosen.index_ref, chosen.whole_ref]:
        push_manifest(ref)
    repo = f"{lying_registry.host}/{name}"
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"COPY --from={repo} / /\n")

    pinned = bake("pin", "--manifest", str(manifest), "--repository", repo, str(dockerfile))
    published = bake("publish", "--manifest", str(manifest), "--repository", repo)

    for proc in (pinned, published):
        assert proc.returncode == 5, proc.stderr
        assert LyingRegistry.LIE in proc.stderr and "hash" in proc.stderr, proc.stderr
    assert dockerfile.read_text() == f"COPY --from={repo} / /\n"
    assert LyingRegistry.LIE not in published.stdout

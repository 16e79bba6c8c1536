"""Registries for tests: the toolchain's loopback registry, registries of their own, odd answers.

``push_manifest`` puts a minimal image manifest under a tag through the registry's HTTP API,
so a test can make a reference exist without building anything. ``LocalRegistry`` runs
Debian's docker-registry on another loopback port, started and stopped by pid (a test that
stops a registry stops one of these); ``AuthRegistry`` is one with Basic auth.
``AnsweringRegistry`` answers every request with one scripted status, for the answers a real
registry will not give on demand (429, a token endpoint that fails); ``OneImageRegistry`` answers
every tag with one image, as a registry that lies would. ``publish_files`` publishes a selection
as ``bake publish`` does, from files instead of a build; ``push_one_layer`` puts another image
under a tag, as anyone who can push could; ``CountingProxy`` counts what reaches a registry.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import json
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.loopback import LoopbackServer

REGISTRY = "127.0.0.1:5000"
USER = "bake"
PASSWORD = "bake-test-password"
# bcrypt of PASSWORD at cost 4 (docker-registry's htpasswd takes bcrypt only; cost 4 keeps logins fast).
_HTPASSWD = f"{USER}:$2b$04$cwPzYmY0TFQVvdtImCQRG.R74.2cYC873TMV9RRwEOKoeDc.apRMi\n"
_CONFIG = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _request(url: str, method: str = "GET", data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    return urllib.request.urlopen(req, timeout=30)


def push_manifest(ref: str, auth: tuple[str, str] | None = None) -> str:
    """Make ``ref`` (``host:port/name:tag``) exist: upload an empty image's config, then its manifest.

    Returns the manifest's digest (``sha256:…``), which the registry serves for ``ref`` from then on.
    """
    host, _, rest = ref.partition("/")
    name, _, tag = rest.rpartition(":")
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    config = json.dumps(_CONFIG).encode()
    digest = "sha256:" + hashlib.sha256(config).hexdigest()
    base = f"http://{host}/v2/{name}"
    with _request(f"{base}/blobs/uploads/", "POST", b"", headers) as answer:
        location = answer.headers["Location"]
    upload = location if location.startswith("http") else f"http://{host}{location}"
    sep = "&" if "?" in upload else "?"
    blob_headers = {**headers, "Content-Type": "application/octet-stream"}
    _request(f"{upload}{sep}digest={digest}", "PUT", config, blob_headers).close()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": digest,
            "size": len(config),
        },
        "layers": [],
    }
    body = json.dumps(manifest).encode()
    _request(f"{base}/manifests/{tag}", "PUT", body, {**headers, "Content-Type": OCI_MANIFEST}).close()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def has_manifest(ref: str, auth: tuple[str, str] | None = None) -> bool:
    """Return whether the registry answers 200 for ``ref``'s manifest (404: False; anything else raises)."""
    host, _, rest = ref.partition("/")
    name, _, tag = rest.rpartition(":")
    headers = {"Accept": OCI_MANIFEST}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    try:
        _request(f"http://{host}/v2/{name}/manifests/{tag}", "HEAD", None, headers).close()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRegistry:
    """docker-registry on a free loopback port, under ``root``, started and stopped by its pid.

    With ``auth`` it asks for htpasswd Basic auth (USER, PASSWORD), as Docker Hub asks for a login.
    Tests that need a registry to stop use one of these, never the toolchain's shared one.
    """

    def __init__(self, root: Path, *, auth: bool = False) -> None:
        self.root = root
        self.auth = auth
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LocalRegistry:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise FileNotFoundError("docker-registry is not installed (scripts/toolchain.sh up installs it)")
        config = self.root / "config.yml"
        text = (
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.root / 'data'}\nhttp:\n  addr: {self.host}\n"
        )
        if self.auth:
            (self.root / "htpasswd").write_text(_HTPASSWD)
            text += f"auth:\n  htpasswd:\n    realm: bake-test\n    path: {self.root / 'htpasswd'}\n"
        config.write_text(text)
        log = (self.root / "registry.log").open("wb")
        self.proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                _request(f"http://{self.host}/v2/").close()
                return self
            except urllib.error.HTTPError as exc:
                if exc.code == 401:  # up, and asking for credentials
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(
            f"docker-registry did not start on {self.host}: {(self.root / 'registry.log').read_text()}"
        )

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)

    def repositories(self) -> list[str]:
        """The repositories that hold anything, read from storage (the catalog itself needs auth)."""
        repos = self.root / "data/docker/registry/v2/repositories"
        return (
            sorted(p.parent.relative_to(repos).as_posix() for p in repos.rglob("_manifests"))
            if repos.exists()
            else []
        )


class AuthRegistry(LocalRegistry):
    """A LocalRegistry that answers 401 to anyone not logged in (htpasswd auth), as Docker Hub does."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, auth=True)


class _Handler(BaseHTTPRequestHandler):
    """The stand-ins' handler: quiet, HEAD answered as GET, and ``reply`` for a whole answer."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        raise NotImplementedError

    def reply(self, status: int, data: bytes, kind: str, *headers: tuple[str, str]) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class _StandIn:
    """A loopback server with the handler ``_handler`` makes; ``host`` is its HOST:PORT, ``with`` runs it."""

    def __init__(self) -> None:
        self.server = LoopbackServer(self._handler())
        self.host = f"127.0.0.1:{self.server.port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


class AnsweringRegistry(_StandIn):
    """A loopback 'registry' whose every answer is ``status`` with ``body``; /token answers ``token_status``.

    With ``bearer``, a request without Authorization first gets 401 and a Bearer challenge
    pointing at /token, as Docker Hub answers.
    """

    def __init__(
        self, status: int, body: dict | None = None, *, bearer: bool = False, token_status: int = 200
    ):
        self.status, self.body, self.bearer, self.token_status = status, body or {}, bearer, token_status
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                if self.path.startswith("/token"):
                    return self._send(registry.token_status, {"token": "t"})
                if registry.bearer and "Authorization" not in self.headers:
                    realm = f'Bearer realm="http://{registry.host}/token",service="test"'
                    return self._send(
                        401, {"errors": [{"code": "UNAUTHORIZED"}]}, ("WWW-Authenticate", realm)
                    )
                return self._send(registry.status, registry.body)

            def _send(self, status: int, body: dict, *header: tuple[str, str]) -> None:
                self.reply(status, json.dumps(body).encode(), "application/json", *header)

        return Handler


def docker_login(host: str, password: str = PASSWORD) -> subprocess.CompletedProcess[str]:
    """`docker login HOST` as USER, the password on stdin."""
    return subprocess.run(
        ["docker", "login", "--username", USER, "--password-stdin", host],
        input=password, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def remove_images_named(marker: str) -> None:
    """Remove from the engine every image a tag or repository digest of which contains ``marker``.

    Publishing through the engine's docker driver keeps a copy of what it pushes; tests that
    publish into repositories named after a run id of their own clear them with this.
    """
    import docker

    engine = docker.from_env(timeout=600)
    try:
        for image in engine.images.list():
            if any(marker in name for name in image.tags + (image.attrs.get("RepoDigests") or [])):
                engine.images.remove(image.id, force=True)
    finally:
        engine.close()


def tree_writer(files: Mapping[str, bytes]) -> Callable[[Path], None]:
    """A ``build(tree)`` for bake.publish.publish_selection: the tar the ``assets`` stage exports.

    ``files`` (asset path -> bytes) at their in-image paths, read-only, mtime 0, with a lock beside
    them for the index: what publishing needs from a build, without building (the build itself is
    tests/test_publish.py's).
    """

    def build(tree: Path) -> None:
        root = "opt/bake/assets"
        names = {root: None, "opt": None, "opt/bake": None}
        for path, data in files.items():
            parts = path.split("/")
            names |= {f"{root}/{'/'.join(parts[:i])}": None for i in range(1, len(parts))}
            names[f"{root}/{path}"] = data
        names[f"{root}/bake.lock.json"] = json.dumps(sorted(files)).encode()
        with tarfile.open(tree, "w", format=tarfile.GNU_FORMAT) as tar:
            for name in sorted(names):
                info, data = tarfile.TarInfo(name), names[name]
                info.mtime, info.mode = 0, 0o555 if data is None else 0o444
                if data is None:
                    info.type = tarfile.DIRTYPE
                else:
                    info.size = len(data)
                tar.addfile(info, None if data is None else io.BytesIO(data))

    return build


def publish_files(manifest: Path, repo: str, groups: Sequence[str], files: Mapping[str, bytes]):
    """Publish ``manifest``'s selection into ``repo`` as ``bake publish`` does, its tree from ``files``."""
    from bake.publish import publish_selection, selection_of

    chosen = selection_of(manifest, repo, groups)
    return publish_selection(chosen, tree_writer({p: files[p] for u in chosen.units for p in u.paths}))


def push_one_layer(ref: str, path: str, data: bytes) -> str:
    """Push a well-formed one-layer image under ``ref`` holding ``data`` at asset ``path``; its digest.

    What anyone who can push to the repository could put under a unit's tag.
    """
    from bake import layers, registry

    work = Path(tempfile.mkdtemp(prefix="bake-test-layer-"))
    try:
        tree = work / "tree.tar"
        tree_writer({path: data})(tree)
        layer = layers.compress(tree)
        config, manifest = layers.image([layer])
        repo, _, tag = ref.rpartition(":")
        target = registry.Registry(repo)
        target.push_blob(layer.digest, path=layer.path)
        target.push_blob(f"sha256:{hashlib.sha256(config).hexdigest()}", data=config)
        return target.put_manifest(tag, manifest, layers.MANIFEST_TYPE)
    finally:
        shutil.rmtree(work)


class OneImageRegistry(_StandIn):
    """A loopback 'registry' that answers every manifest request, whatever the tag, with one image.

    The image has ``layers`` layers (random bytes it never serves; only the manifest and config
    are asked for). It counts the requests it answers, by path.
    """

    def __init__(self, layers: int = 0) -> None:
        diff_ids = [f"sha256:{hashlib.sha256(bytes([i])).hexdigest()}" for i in range(layers)]
        self.config = json.dumps({**_CONFIG, "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
        config_digest = "sha256:" + hashlib.sha256(self.config).hexdigest()
        described = [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": 1} for d in diff_ids
        ]
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(self.config),
                },
                "layers": described,
            }
        ).encode()
        self.digest = "sha256:" + hashlib.sha256(self.manifest).hexdigest()
        self.blobs = {config_digest: self.config}
        self.requests: list[str] = []
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                registry.requests.append(f"{self.command} {self.path}")
                digest = self.path.rpartition("/")[2]
                if "/manifests/" in self.path:
                    self.reply(
                        200, registry.manifest, OCI_MANIFEST, ("Docker-Content-Digest", registry.digest)
                    )
                elif "/blobs/" in self.path and digest in registry.blobs:
                    self.reply(200, registry.blobs[digest], "application/octet-stream")
                elif self.path == "/v2/":
                    self.reply(200, b"{}", "application/json")
                else:
                    self.reply(404, b"", "text/plain")

        return Handler


class CountingProxy(_StandIn):
    """A loopback HTTP proxy in front of ``upstream`` (``host:port``) that records each request it passes.

    ``requests`` holds ``METHOD PATH`` per request, in the order they arrived.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.requests: list[str] = []
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(_Handler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                proxy.requests.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for key, value in self.headers.items():  # each Accept line, as sent
                        if key.lower() != "content-length":
                            conn.putheader(key, value)
                    conn.putheader("Content-Length", str(len(body or b"")))
                    conn.endheaders(body)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                length = answer.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

        return Handler

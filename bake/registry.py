"""Push a hand-written image to a registry over the distribution HTTP API (v2).

The Docker engine's ``docker push`` recompresses what it pushes (gzip, from its own store), so the
unit images (bake.layers) go to the registry directly: each blob once (a blob the repository
already has is not sent again), then the manifest, whose digest the registry must answer with.

Loopback registries are spoken to over plain HTTP, as the Docker engine does; every other over
HTTPS. Credentials are the ones ``docker login`` stored (through the docker SDK's reader, the
``[registry]`` extra), sent only when the registry asks: as Basic, or for a Bearer token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from bake.errors import BuildError
from bake.text import escape

TIMEOUT = 300
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


def split_repository(repository: str) -> tuple[str, str]:
    """Return (registry host, repository path) as Docker reads a repository name."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "registry-1.docker.io", repository if "/" in repository else f"library/{repository}"


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.index("]")]
    return name in ("localhost", "::1") or name.startswith("127.")


class Registry:
    """One repository on one registry, with the token it was given."""

    def __init__(self, repository: str) -> None:
        self.host, self.name = split_repository(repository)
        self.base = f"{'http' if _loopback(self.host) else 'https'}://{self.host}/v2/{self.name}"
        self.auth: str | None = None

    def _open(self, method: str, url: str, data=None, headers: dict | None = None, retry: bool = True):
        request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and retry and self._authorize(exc.headers.get("WWW-Authenticate", "")):
                return self._open(method, url, data, headers, retry=False)
            raise

    def _authorize(self, challenge: str) -> bool:
        """Answer a 401's challenge with ``docker login``'s credentials; False when there is none to try."""
        scheme, _, params = challenge.partition(" ")
        user, secret = _credentials(self.host)
        basic = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode() if user else None
        if scheme.lower() == "basic":
            self.auth = basic
            return basic is not None
        fields = dict(_CHALLENGE.findall(params))
        if scheme.lower() != "bearer" or "realm" not in fields:
            return False
        query = {"service": fields.get("service", ""), "scope": f"repository:{self.name}:pull,push"}
        request = urllib.request.Request(f"{fields['realm']}?{urllib.parse.urlencode(query)}")
        if basic:
            request.add_header("Authorization", basic)
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            doc = json.load(answer)
        self.auth = f"Bearer {doc.get('token') or doc.get('access_token')}"
        return True

    def has_blob(self, digest: str) -> bool:
        try:
            with self._open("HEAD", f"{self.base}/blobs/{digest}"):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise

    def push_blob(self, digest: str, path: Path | None = None, data: bytes | None = None) -> bool:
        """Upload one blob (a file or bytes) unless the repository has it; True when it was sent."""
        if self.has_blob(digest):
            return False
        with self._open("POST", f"{self.base}/blobs/uploads/", data=b"") as answer:
            location = urllib.parse.urljoin(self.base, answer.headers["Location"])
        sep = "&" if "?" in location else "?"
        url = f"{location}{sep}digest={urllib.parse.quote(digest)}"
        size = path.stat().st_size if path is not None else len(data or b"")
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        if path is not None:
            with path.open("rb") as body, self._open("PUT", url, data=body, headers=headers):
                pass
        else:
            with self._open("PUT", url, data=data, headers=headers):
                pass
        return True

    def put_manifest(self, tag: str, manifest: bytes, media_type: str) -> str:
        """Put the manifest under ``tag``; return its digest, checked against the registry's answer."""
        digest = f"sha256:{hashlib.sha256(manifest).hexdigest()}"
        with self._open(
            "PUT", f"{self.base}/manifests/{tag}", data=manifest, headers={"Content-Type": media_type}
        ) as answer:
            said = answer.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise BuildError(
                f"the registry {self.host} stored the manifest of {self.name}:{tag} as {said}, but its bytes "
                f"hash to {digest}; fix or replace the registry, then rerun"
            )
        return digest


def failure(repository: str, exc: Exception) -> BuildError:
    """The one error for a push that failed: what the registry said, and what to do."""
    if isinstance(exc, urllib.error.HTTPError):
        said = escape(exc.read(500).decode("utf-8", "replace").strip())
        todo = {
            401: "run `docker login` for it with an account that can push, then rerun",
            403: "use a repository your account can push to",
        }.get(exc.code, "check the registry, then rerun")
        return BuildError(f"pushing to {repository} failed ({exc.code} {exc.reason}: {said}); {todo}")
    return BuildError(
        f"pushing to {repository} failed: the registry could not be reached ({escape(str(exc))}); "
        "check that it is up and reachable from this machine, then rerun"
    )


def _credentials(host: str) -> tuple[str | None, str | None]:
    """``docker login``'s stored user and secret for ``host``, or (None, None)."""
    try:
        import docker
    except ImportError:
        return None, None
    key = "https://index.docker.io/v1/" if host == "registry-1.docker.io" else host
    found = docker.auth.resolve_authconfig(docker.auth.load_config(), key) or {}
    return found.get("username") or found.get("Username"), found.get("password") or found.get("Password")

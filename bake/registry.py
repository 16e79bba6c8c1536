"""Speak the distribution HTTP API (v2) to one repository: ask what a tag serves, push a hand-written image.

The Docker engine's ``docker push`` recompresses what it pushes (gzip, from its own store), so the
unit images (bake.layers) go to the registry directly: each blob once (a blob the repository
already has is mounted, not sent again), then the manifest, whose digest the registry must answer
with. Asking goes the same way: one GET of the manifest, whose bytes are hashed here, so the digest
bake pins names the bytes the registry serves, not the registry's word for them. Only the
registry's definite "unknown" (MANIFEST_UNKNOWN or NAME_UNKNOWN) means missing; any other answer
is a BuildError that names the registry, the answer and what to do.

Loopback registries are spoken to over plain HTTP, as the Docker engine does; every other over
HTTPS. Credentials are the ones ``docker login`` stored (through the docker SDK's reader, the
``[registry]`` extra), sent only when the registry asks: as Basic, or for a Bearer token, which
one thread fetches while the others wait for it. They never follow a redirect to another host
(a blob store answering for the registry). ``concurrently`` runs one question per tag at once.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bake.control_chars import escape
from bake.errors import BakeError, BuildError, UsageError
from bake.reference import host_of

TIMEOUT = 300  # seconds for one request that sends or receives a layer
ASK_TIMEOUT = 60  # seconds for one question: a manifest or a config
# Questions and pushes in flight at once, over as many connections.
CONNECTIONS = 8
# A manifest or config larger than this is no image of bake's (distribution refuses manifests over 4 MiB).
MAX_DOCUMENT = 4 << 20
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
# The registry's codes for a definite "no such tag" (distribution's errcode names).
_UNKNOWN = {"MANIFEST_UNKNOWN", "NAME_UNKNOWN"}
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
T = TypeVar("T")
R = TypeVar("R")


def split_repository(repository: str) -> tuple[str, str]:
    """Return (registry host, repository path) as Docker reads a repository name."""
    host = host_of(repository)
    if host is not None:
        return host, repository.partition("/")[2]
    return "registry-1.docker.io", repository if "/" in repository else f"library/{repository}"


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.index("]")]
    return name in ("localhost", "::1") or name.startswith("127.")


def concurrently(items: Iterable[T], work: Callable[[T], R]) -> list[R]:
    """Return ``work(item)`` for every item, in order, up to CONNECTIONS at once; the first error raises."""
    items = list(items)
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(CONNECTIONS, len(items))) as pool:
        return list(pool.map(work, items))


class TokenFailure(OSError):
    """The registry's token endpoint gave no token: no definite answer about anything."""


@dataclass(frozen=True)
class Served:
    """A manifest the registry serves: its digest (the sha256 of its bytes), media type and bytes."""

    digest: str
    media_type: str
    body: bytes


class Registry:
    """One repository on one registry, with the token it was given; usable from several threads."""

    def __init__(self, repository: str) -> None:
        self.repository = repository
        self.host, self.name = split_repository(repository)
        self.base = f"{'http' if _loopback(self.host) else 'https'}://{self.host}/v2/{self.name}"
        self.auth: str | None = None
        self._auth_lock = threading.Lock()

    def _open(self, method: str, url: str, data=None, headers: dict | None = None, timeout: float = TIMEOUT):
        sent = self.auth
        request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        if sent:
            # Unredirected: a redirect to a blob store on another host must not carry it.
            request.add_unredirected_header("Authorization", sent)
        try:
            return urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise
            with self._auth_lock:  # one thread fetches a token; the others use it
                fresh = self.auth != sent or self._authorize(exc.headers.get("WWW-Authenticate", ""))
            if not fresh or self.auth == sent:
                raise
            request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
            request.add_unredirected_header("Authorization", self.auth)
            return urllib.request.urlopen(request, timeout=timeout)

    def _authorize(self, challenge: str) -> bool:
        """Answer a 401's challenge with ``docker login``'s credentials; False when there is none to try.

        Raises TokenFailure when the token endpoint does not give a token.
        """
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
            request.add_unredirected_header("Authorization", basic)
        try:
            with urllib.request.urlopen(request, timeout=ASK_TIMEOUT) as answer:
                doc = json.loads(answer.read(MAX_DOCUMENT))
            token = doc.get("token") or doc.get("access_token")
        except (OSError, ValueError, AttributeError) as exc:
            raise TokenFailure(f"its token endpoint {fields['realm']} gave no token ({_said(exc)})") from None
        if not isinstance(token, str) or not token:
            raise TokenFailure(f"its token endpoint {fields['realm']} answered without a token")
        self.auth = f"Bearer {token}"
        return True

    def manifest(self, tag: str) -> Served | None:
        """Return the manifest the registry serves for ``tag`` (or a digest), or None only if it has none.

        Raises BuildError for any other answer, and for bytes that do not hash to the digest the
        registry names them by (its Docker-Content-Digest, or the digest asked for).
        """
        ref = f"{self.repository}{'@' if tag.startswith('sha256:') else ':'}{tag}"
        try:
            with self._open(
                "GET", f"{self.base}/manifests/{tag}", headers={"Accept": ", ".join(MANIFEST_TYPES)},
                timeout=ASK_TIMEOUT,
            ) as answer:  # fmt: skip
                body = answer.read(MAX_DOCUMENT + 1)
                said = answer.headers.get("Docker-Content-Digest")
                media_type = answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and _codes(exc) & _UNKNOWN:
                return None
            raise self.ask_failure(ref, exc) from None
        except (OSError, ValueError) as exc:  # ValueError: a host no URL can hold (an IPv6 "[:]")
            raise self.ask_failure(ref, exc) from None
        if len(body) > MAX_DOCUMENT:
            raise BuildError(
                f"the registry {self.host} serves more than {MAX_DOCUMENT >> 20} MiB as the manifest of "
                f"{ref}; no image manifest is that large: check that it is a Docker/OCI distribution registry"
            )
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        for named in filter(None, (said, tag if tag.startswith("sha256:") else None)):
            if named != digest:
                raise BuildError(
                    f"the registry {self.host} names the manifest of {ref} {named}, but the bytes it serves "
                    f"hash to {digest}; a pin would name something else than what it serves: fix or "
                    "replace the registry, then rerun"
                )
        return Served(digest, media_type, body)

    def blob(self, digest: str, what: str) -> bytes:
        """Return a small blob (an image config) the repository serves, checked against its digest.

        ``what`` names it in errors (``the config of REPO:TAG``). Raises BuildError when the
        registry lacks it, serves more than MAX_DOCUMENT, or serves bytes of another digest.
        """
        try:
            with self._open("GET", f"{self.base}/blobs/{digest}", timeout=ASK_TIMEOUT) as answer:
                body = answer.read(MAX_DOCUMENT + 1)
        except (OSError, ValueError) as exc:
            raise self.ask_failure(f"{what} ({digest})", exc) from None
        served = f"sha256:{hashlib.sha256(body).hexdigest()}"
        if len(body) > MAX_DOCUMENT or served != digest:
            raise BuildError(
                f"the registry {self.host} serves other bytes as {what}: expected {digest}, got "
                f"{'more than 4 MiB' if len(body) > MAX_DOCUMENT else served}; fix or replace the registry"
            )
        return body

    def push_blob(self, digest: str, path: Path | None = None, data: bytes | None = None) -> bool:
        """Upload one blob (a file or bytes) unless the repository has it; True when it was sent.

        The upload starts as a mount of the blob from this same repository: one request that
        ends the upload at once (201) when the repository has the blob, and otherwise opens it.
        """
        query = urllib.parse.urlencode({"mount": digest, "from": self.name})
        with self._open("POST", f"{self.base}/blobs/uploads/?{query}", data=b"") as answer:
            if answer.status == 201:
                return False
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

    def ask_failure(self, ref: str, exc: Exception) -> BakeError:
        """The error for a question about ``ref`` that got no definite answer: what was said, what to do."""
        host = self.host
        if isinstance(exc, TokenFailure):
            return BuildError(
                f"cannot tell whether the registry {host} has {ref}: {exc}, so it gave no definite answer; "
                f"check `docker login {host}` (and the credential helper it uses) and the registry's token "
                "service, then rerun"
            )
        if not isinstance(exc, urllib.error.HTTPError):
            reason = getattr(exc, "reason", exc)
            what = "connection refused" if isinstance(reason, ConnectionRefusedError) else _said(reason)
            return BuildError(
                f"cannot ask the registry {host} for {ref}: {what}; check that it is up and reachable "
                "from this machine, then rerun"
            )
        said = f"{exc.code}: {_said(exc)}"
        if exc.code == 401 and self.auth:
            return BuildError(
                f"the registry {host} refused the credentials for {ref} ({said}); "
                f"run `docker login {host}` with an account that can push to it, then rerun"
            )
        if exc.code == 401 and not _can_read_logins():
            return _no_sdk(f"the registry {host} asks for a login to answer for {ref} ({said})")
        if exc.code == 401:
            return BuildError(
                f"the registry {host} asks for a login to answer for {ref} ({said}) and no `docker login` "
                f"credentials for it are stored: run `docker login {host}`, then rerun"
            )
        todo = {
            403: (
                f"the registry {host} denies access to {ref} ({said}); the account `docker login` stored "
                "may pull but not push, or the repository belongs to another namespace: use a repository "
                "you can push to"
            ),
            429: (
                f"the registry {host} is rate-limiting requests for {ref} ({said}); wait and rerun, log in "
                "(`docker login`) for a higher limit, or use a registry mirror you run"
            ),
        }
        return BuildError(
            todo.get(exc.code)
            or f"cannot tell whether the registry {host} has {ref}: it gave no definite answer ({said}); "
            "check that it is a Docker/OCI distribution registry and answers, then rerun"
        )


def _body(exc: urllib.error.HTTPError) -> bytes:
    """An error answer's body (its first 64 KiB), read once and kept on the exception."""
    if not hasattr(exc, "bake_body"):
        try:
            exc.bake_body = exc.read(64 << 10)  # type: ignore[attr-defined]
        except OSError:
            exc.bake_body = b""  # type: ignore[attr-defined]
    return exc.bake_body  # type: ignore[attr-defined]


def _codes(exc: urllib.error.HTTPError) -> set[str]:
    """The distribution error codes in an error answer's body (none when it is not one)."""
    try:
        errors = json.loads(_body(exc)).get("errors")
        return {e.get("code") for e in errors if isinstance(e, dict)}
    except (ValueError, AttributeError, TypeError):
        return set()


def _said(exc: BaseException) -> str:
    """What an answer or a failure said, short and escaped: an error body's start, or the reason."""
    if isinstance(exc, urllib.error.HTTPError):
        text = _body(exc)[:500].decode("utf-8", "replace").strip()
        return escape(text or str(exc.reason))
    return escape(str(exc))


def failure(repository: str, exc: Exception) -> BakeError:
    """The one error for a push that failed: what the registry said, and what to do."""
    if isinstance(exc, urllib.error.HTTPError):
        said = _said(exc)
        if exc.code == 401 and not _can_read_logins():
            return _no_sdk(f"pushing to {repository} needs a login ({exc.code} {exc.reason}: {said})")
        todo = {
            401: "run `docker login` for it with an account that can push, then rerun",
            403: "use a repository your account can push to",
        }.get(exc.code, "check the registry, then rerun")
        return BuildError(f"pushing to {repository} failed ({exc.code} {exc.reason}: {said}); {todo}")
    return BuildError(
        f"pushing to {repository} failed: the registry could not be reached ({escape(str(exc))}); "
        "check that it is up and reachable from this machine, then rerun"
    )


def _can_read_logins() -> bool:
    """Whether ``docker login``'s stored credentials can be read here: the docker SDK reads them."""
    return importlib.util.find_spec("docker") is not None


def _no_sdk(what: str) -> UsageError:
    """A registry asks for a login that bake cannot read here (no docker SDK): an install to make, exit 2."""
    return UsageError(
        f"{what}, and bake reads `docker login`'s credentials through the docker SDK (bake's [registry] "
        f"extra), which is not installed; install it where bake runs: {sys.executable} -m pip install "
        "'docker>=7', then rerun"
    )


def _credentials(host: str) -> tuple[str | None, str | None]:
    """``docker login``'s stored user and secret for ``host``, or (None, None)."""
    try:
        import docker
    except ImportError:
        return None, None
    key = "https://index.docker.io/v1/" if host == "registry-1.docker.io" else host
    try:
        found = docker.auth.resolve_authconfig(docker.auth.load_config(), key) or {}
    except docker.errors.DockerException as exc:  # a credential helper that is missing or fails
        raise TokenFailure(f"the credentials `docker login` stored for it cannot be read ({exc})") from None
    return found.get("username") or found.get("Username"), found.get("password") or found.get("Password")

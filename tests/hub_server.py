"""A loopback Hugging Face Hub: the part of the Hub API huggingface_hub 2.4 uses to resolve and download.

Two servers on 127.0.0.1 in one process: the Hub, and a separate CDN origin that
LFS files redirect to. Read from huggingface_hub's own requests (hf_api.py,
file_download.py, utils/_http.py):

- ``GET /api/{models,datasets}/ORG/NAME[/revision/REV]`` (``?blobs=True``): ``sha`` and
  ``siblings`` with ``size``, ``blobId`` and ``lfs`` {``size``, ``sha256``, ``pointerSize``};
- ``GET /api/{models,datasets}/ORG/NAME[/revision/REV]?expand=sha``: only the listed properties;
- ``GET /api/{models,datasets}/ORG/NAME/tree/REV[/PATH]`` (``?recursive=True``): files
  (``oid``, ``size``, ``lfs`` {``oid``, ``size``, ``pointerSize``}) and directories, 1,000 entries
  a page as the Hub pages them: a ``Link: <…&cursor=…>; rel="next"`` header names the next page;
- ``HEAD``/``GET /[datasets/]ORG/NAME/resolve/REV/PATH``: ``X-Repo-Commit`` and ``ETag``;
  a small file is served here (ETag = its git blob id); an LFS file answers 302 to the
  CDN with ``X-Linked-Etag`` (its sha256) and ``X-Linked-Size``;
- errors carry ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo),
  which huggingface_hub turns into its own exception types;
- the CDN (``/cdn/<sha256>``) serves ``Range`` requests, optionally at a per-connection rate.

A gated repository answers 401 without ``Authorization: Bearer <its token>``. A repository
can be made hostile (``LoopbackHub.hostile``): its answers then carry the commit ids, ETags,
paths, sizes and listings a test chooses, as a broken or malicious endpoint would. The spec
file is re-read when it changes, so a test can change a repository's content at a
commit (what an origin must never do) or remove a file. Run as a process, stopped by
pid (SIGTERM)::

    python -m tests.hub_server --spec SPEC.json --port-file PORTS [--rate BYTES_PER_S]

SPEC: ``{"repos": [{"repo": "org/name", "type": "model", "token": null, "refs": {"main":
COMMIT}, "commits": {COMMIT: {PATH: FILE}}, "hostile": {…}, "page_size": 1000}]}``, where FILE
is ``{"file": ABSOLUTE_PATH, "lfs": BOOL}``, ``{"data": BASE64}`` (a small file held inline) or
``{"lfs": true, "size": N, "sha256": HEX}`` (listed, never served: listings at scale).
PORTS receives ``{"hub": PORT, "cdn": PORT, "pid": PID}``. ``GET /_stats`` on the Hub
returns the request counters of both servers, including whether the CDN ever saw a token.
"""

from __future__ import annotations

import argparse
import base64
import collections
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from tests.loopback import LoopbackServer
from tests.runners import bake

CHUNK = 256 * 1024
PAGE_SIZE = 1000  # tree entries per page, as the Hub serves them without expand
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_RESOLVE = re.compile(r"^/(?:(datasets)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_API = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+?)(?:/(revision|tree)/([^/]+)(?:/(.*))?)?$")


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob with these bytes (what the Hub calls ``oid``/``blobId``)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file that stands in the git tree for an LFS object."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class Unserved:
    """An LFS file the Hub lists (size, sha256) but whose bytes no test downloads: listings at scale."""

    size: int
    sha256: str


@dataclass(frozen=True)
class RepoFile:
    """One file at one commit, with the identities the Hub reports for it."""

    path: str
    source: str | None  # a file on disk, or None when the bytes are inline (data) or never served
    size: int
    sha256: str
    blob_id: str
    lfs: bool
    data: bytes | None = None

    def tree_entry(self) -> dict:
        entry: dict = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path}
        if self.lfs:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.sha256, self.size))

    def read(self, start: int, n: int) -> bytes:
        if self.data is not None:
            return self.data[start : start + n]
        if self.source is None:
            return b""
        with open(self.source, "rb") as fh:
            return os.pread(fh.fileno(), n, start)


def _describe(path: str, spec: dict) -> RepoFile:
    """A RepoFile from its spec entry: a file on disk, inline data, or a listed-only LFS file."""
    lfs = spec.get("lfs", False)
    if "sha256" in spec:  # listed only
        sha, size = spec["sha256"], spec["size"]
        return RepoFile(path, None, size, sha, git_blob_id(lfs_pointer(sha, size)), True)
    data = base64.b64decode(spec["data"]) if "data" in spec else None
    digest, blob = hashlib.sha256(), hashlib.sha1()
    size = len(data) if data is not None else os.path.getsize(spec["file"])
    blob.update(b"blob %d\x00" % size)
    if data is not None:
        digest.update(data)
        blob.update(data)
    else:
        with open(spec["file"], "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
                blob.update(block)
    sha = digest.hexdigest()
    blob_id = git_blob_id(lfs_pointer(sha, size)) if lfs else blob.hexdigest()
    return RepoFile(path, spec.get("file"), size, sha, blob_id, lfs, data)


class Hub:
    """The repositories the spec describes, re-read whenever the spec file changes."""

    def __init__(self, spec: Path) -> None:
        self.spec = spec
        self._mtime = -1.0
        self._lock = threading.Lock()
        self.repos: dict[tuple[str, str], dict] = {}
        self.blobs: dict[str, RepoFile] = {}
        self.stats: collections.Counter = collections.Counter()
        self._trees: dict[tuple[str, str, str], list[dict]] = {}

    def refresh(self) -> None:
        with self._lock:
            mtime = self.spec.stat().st_mtime_ns
            if mtime == self._mtime:
                return
            repos, blobs = {}, {}
            for raw in json.loads(self.spec.read_text())["repos"]:
                commits = {}
                for commit, files in raw["commits"].items():
                    described = {p: _describe(p, f) for p, f in files.items()}
                    commits[commit] = described
                    blobs.update({f.sha256: f for f in described.values()})
                repos[(raw.get("type", "model"), raw["repo"])] = {
                    "token": raw.get("token"),
                    "refs": raw.get("refs", {}),
                    "commits": commits,
                    "hostile": raw.get("hostile", {}),
                    "page_size": raw.get("page_size", PAGE_SIZE),
                }
            self.repos, self.blobs, self._mtime = repos, blobs, mtime
            self._trees = {}

    def recursive_tree(self, kind: str, repo_id: str, commit: str) -> list[dict]:
        """Every directory and file at ``commit``, directories first, each sorted: computed once."""
        key = (kind, repo_id, commit)
        with self._lock:
            if key not in self._trees:
                files = self.repos[(kind, repo_id)]["commits"][commit]
                dirs = {str(parent) for p in files for parent in Path(p).parents if str(parent) != "."}
                folders = [
                    {"type": "directory", "oid": git_blob_id(d.encode()), "size": 0, "path": d}
                    for d in sorted(dirs)
                ]
                self._trees[key] = folders + [files[p].tree_entry() for p in sorted(files)]
            return self._trees[key]


def hostile_entry(entry: dict, hostile: dict) -> dict:
    """A tree entry (or sibling) as a hostile Hub tells it: the fields the test chose, replaced."""
    if entry["type"] != "file":
        return entry
    entry = dict(entry)
    entry["path"] = hostile.get("paths", {}).get(entry["path"], entry["path"])
    for field, key in (("size", "size"), ("oid", "blob")):
        if key in hostile:
            entry[field] = hostile[key]
    if "lfs" in entry and "lfs_sha256" in hostile:
        entry["lfs"] = {**entry["lfs"], "oid": hostile["lfs_sha256"]}
    return entry


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and a small body go out at once, as from a real server
    hub: Hub
    rate: float | None = None
    cdn_base = ""
    role = "hub"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def _dispatch(self, head: bool) -> None:
        self.hub.refresh()
        path = urlsplit(self.path).path
        self.hub.stats[f"{self.role} {self.command} {path}"] += 1
        if self.role == "cdn":
            if self.headers.get("Authorization"):
                self.hub.stats["cdn authorization seen"] += 1
            return self._cdn(path, head)
        if path == "/_stats":
            return self._json(200, dict(self.hub.stats))
        if match := _API.match(path):
            return self._api(*match.groups())
        if match := _RESOLVE.match(path):
            kind = "dataset" if match.group(1) else "model"
            return self._resolve(kind, match.group(2), unquote(match.group(3)), unquote(match.group(4)), head)
        return self._error(404, "RepoNotFound", "no such route")

    def _send(self, status: int, headers: dict, body: bytes = b"", head: bool = False) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _json(self, status: int, doc: object, headers: dict | None = None, pad: int = 0) -> None:
        body = json.dumps(doc).encode() + b" " * pad  # trailing spaces keep it valid JSON, only longer
        self._send(
            status, {"Content-Type": "application/json", **(headers or {})}, body, self.command == "HEAD"
        )

    def _error(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        self._json(
            status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})}
        )

    def _repo(self, kind: str, repo_id: str, revision: str) -> tuple[dict, str] | None:
        """Return (repo, commit) or answer the error, as the Hub does, and return None."""
        repo = self.hub.repos.get((kind, repo_id))
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            return None
        if repo["token"] and self.headers.get("Authorization") != f"Bearer {repo['token']}":
            self._error(401, "GatedRepo", f"Access to {repo_id} is restricted; you must be authenticated")
            return None
        commit = repo["refs"].get(revision, revision)
        if commit not in repo["commits"]:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo, commit

    def _api(
        self, plural: str, repo_id: str, what: str | None, revision: str | None, sub: str | None
    ) -> None:
        kind = plural[:-1]
        found = self._repo(kind, repo_id, unquote(revision or "main"))
        if found is None:
            return
        repo, commit = found
        query = parse_qs(urlsplit(self.path).query)
        if what == "tree":
            if query.get("recursive", ["False"])[0].lower() == "true" and not sub:
                return self._tree_page(kind, repo_id, commit, repo, query)
            return self._tree(repo["commits"][commit], unquote(sub or ""), query)
        files = repo["commits"][commit]
        hostile = repo["hostile"]
        siblings = []
        for f in sorted(files.values(), key=lambda f: f.path):
            told = hostile_entry(f.tree_entry(), hostile)
            sibling = {"rfilename": told["path"], "size": told["size"], "blobId": told["oid"]}
            if f.lfs:
                sibling["lfs"] = {"size": f.size, "sha256": told["lfs"]["oid"], "pointerSize": f.pointer_size}
            siblings.append(sibling)
        gated = "auto" if repo["token"] else False
        info = {"id": repo_id, "sha": hostile.get("commit", commit), "private": False, "gated": gated}
        info["siblings"] = siblings
        expand = query.get("expand", []) + query.get("expand[]", [])
        if expand:
            info = {k: v for k, v in info.items() if k in expand or k == "id"}
        self._json(200, info)

    def _tree_page(self, kind: str, repo_id: str, commit: str, repo: dict, query: dict) -> None:
        """One page of the recursive listing, with a Link header to the next, as the Hub pages it."""
        hostile = repo["hostile"]
        listing = self.hub.recursive_tree(kind, repo_id, commit)
        size = repo["page_size"]
        start = int(base64.urlsafe_b64decode(query["cursor"][0]).decode()) if "cursor" in query else 0
        page = [hostile_entry(e, hostile) for e in listing[start : start + size]]
        page += hostile.get("extra_entries", []) if start == 0 else []
        following = start + size
        mode = hostile.get("listing")
        if mode == "loop":
            following = start  # the next page is this one, forever
        elif mode == "endless":
            following = start + size if start + size < len(listing) else len(listing) + start % 7 + 1
            page = page or [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f"d{start}"}]
        headers = {}
        if following < len(listing) or mode in ("loop", "endless"):
            cursor = base64.urlsafe_b64encode(str(following).encode()).decode()
            params = urlencode({"recursive": "True", "expand": "False", "cursor": cursor})
            url = f"http://{self.headers.get('Host')}{urlsplit(self.path).path}?{params}"
            headers["Link"] = f'<{url}>; rel="next"'
        self._json(200, page, headers, pad=hostile.get("pad", 0))

    def _tree(self, files: dict[str, RepoFile], sub: str, query: dict) -> None:
        recursive = query.get("recursive", ["False"])[0].lower() == "true"
        prefix = f"{sub.rstrip('/')}/" if sub else ""
        entries, dirs = [], set()
        for f in sorted(files.values(), key=lambda f: f.path):
            if not f.path.startswith(prefix):
                continue
            rest = f.path[len(prefix) :].split("/")
            for depth in range(1, len(rest)):
                if recursive or depth == 1:
                    dirs.add(prefix + "/".join(rest[:depth]))
            if recursive or len(rest) == 1:
                entries.append(f.tree_entry())
        if sub and not entries and not dirs:
            return self._error(404, "EntryNotFound", f"{sub} does not exist")
        folders = [
            {"type": "directory", "oid": git_blob_id(d.encode()), "size": 0, "path": d} for d in sorted(dirs)
        ]
        self._json(200, folders + entries)

    def _resolve(self, kind: str, repo_id: str, revision: str, path: str, head: bool) -> None:
        found = self._repo(kind, repo_id, revision)
        if found is None:
            return
        repo, commit = found
        hostile = repo["hostile"]
        failed = self.hub.stats[f"503 {repo_id}"]
        if failed < hostile.get("fail_first", 0):  # a Hub that is down for a moment
            self.hub.stats[f"503 {repo_id}"] += 1
            return self._error(503, "ServiceUnavailable", "try again")
        told = {v: k for k, v in hostile.get("paths", {}).items()}.get(path, path)
        entry = repo["commits"][commit].get(told)
        shown = str(hostile.get("commit", commit))
        if entry is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist", {"X-Repo-Commit": shown})
        headers = {"X-Repo-Commit": shown, "Accept-Ranges": "bytes"}
        if entry.lfs:
            headers |= {
                "ETag": f'"{entry.blob_id}"',
                "X-Linked-Etag": f'"{hostile.get("etag", entry.sha256)}"',
                "X-Linked-Size": str(hostile.get("linked_size", entry.size)),
                "Location": f"{self.cdn_base}/cdn/{entry.sha256}?name={quote(path)}",
            }
            return self._send(302, headers, head=True)
        headers["ETag"] = f'"{hostile.get("etag", entry.blob_id)}"'
        self._file(entry, headers, head, stall=0.0 if head else hostile.get("stall", 0.0))

    def _cdn(self, path: str, head: bool) -> None:
        sha = path.rsplit("/", 1)[-1]
        entry = self.hub.blobs.get(sha) if path.startswith("/cdn/") else None
        if entry is None or (entry.source is None and entry.data is None):
            return self._send(404, {}, b"no such object")
        self._file(entry, {"ETag": f'"{entry.sha256}"', "Accept-Ranges": "bytes"}, head)

    def _file(self, entry: RepoFile, headers: dict, head: bool, stall: float = 0.0) -> None:
        """Serve the file (or a range of it); with ``stall``, go silent that long after the headers."""
        start, end = 0, entry.size - 1
        status = 200
        wanted = _RANGE.match(self.headers.get("Range", ""))
        if wanted and entry.size:
            start = int(wanted.group(1))
            end = min(int(wanted.group(2) or end), end)
            if start > end:
                return self._send(416, {"Content-Range": f"bytes */{entry.size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        headers["Content-Length"] = str(end - start + 1 if entry.size else 0)
        self._send(status, headers, head=True)
        if stall:
            self.wfile.flush()
            time.sleep(stall)
            self.close_connection = True
            return
        if not head:
            self._stream(entry, start, end + 1)

    def _stream(self, entry: RepoFile, start: int, stop: int) -> None:
        began = time.monotonic()
        sent = 0
        while start + sent < stop:
            block = entry.read(start + sent, min(CHUNK, stop - start - sent))
            if not block:
                break
            try:
                self.wfile.write(block)
            except (BrokenPipeError, ConnectionResetError):
                return
            sent += len(block)
            self.hub.stats[f"{self.role} bytes"] += len(block)
            if self.rate:
                ahead = sent / self.rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)


def serve(spec: Path, rate: float | None = None) -> tuple[LoopbackServer, LoopbackServer]:
    """Start the Hub and its CDN on free loopback ports, in daemon threads; return both servers."""
    hub = Hub(spec)
    hub.refresh()
    cdn_handler = type("CdnHandler", (_Handler,), {"hub": hub, "rate": rate, "role": "cdn"})
    cdn = LoopbackServer(cdn_handler).start()
    hub_handler = type("HubHandler", (_Handler,), {"hub": hub, "cdn_base": cdn.base_url, "role": "hub"})
    return LoopbackServer(hub_handler).start(), cdn


class LoopbackHub:
    """Test side: describe repositories, run ``python -m tests.hub_server`` on them, stop it by pid.

    ``with LoopbackHub(tmp) as hub: commit = hub.commit("org/name", {"a.json": b"{}"})``, then
    ``HF_ENDPOINT=hub.endpoint``. Files given as ``(bytes, True)`` are LFS files (served by the CDN).
    """

    def __init__(self, root: Path, rate: float | None = None) -> None:
        self.root = Path(root)
        self.rate = rate
        self.repos: dict[tuple[str, str], dict] = {}
        self.process: subprocess.Popen | None = None
        self.ports: dict = {}
        self._version = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['hub']}"

    def commit(
        self,
        repo: str,
        files: dict,
        *,
        kind: str = "model",
        ref: str | None = "main",
        token: str | None = None,
    ) -> str:
        """Add a commit holding ``files`` (path -> bytes, (bytes, lfs) or Unserved); return its id."""
        identity = sorted((p, self._identity(v)) for p, v in files.items())
        commit = hashlib.sha1(repr(identity).encode() + repo.encode()).hexdigest()
        entry = self.repos.setdefault(
            (kind, repo), {"repo": repo, "type": kind, "token": token, "refs": {}, "commits": {}}
        )
        entry["commits"][commit] = {}
        for path, value in files.items():
            self._store(entry, commit, path, value)
        if ref is not None:
            entry["refs"][ref] = commit
        self._write_spec()
        return commit

    @staticmethod
    def _identity(value: object) -> tuple:
        if isinstance(value, Unserved):
            return (value.sha256, True)
        data, lfs = value if isinstance(value, tuple) else (value, False)
        return (hashlib.sha256(data).hexdigest(), lfs)

    def hostile(
        self, repo: str, *, kind: str = "model", page_size: int | None = None, **answers: object
    ) -> None:
        """Make ``repo`` answer as a broken or malicious Hub would; no answers makes it honest again.

        ``commit`` (the sha and X-Repo-Commit told), ``etag`` (ETag, or X-Linked-Etag of an LFS
        file), ``linked_size``, ``paths`` ({real: told}), ``size``, ``blob`` and ``lfs_sha256`` (the
        listings' fields), ``extra_entries`` (raw entries added to the first page), ``listing``
        (``loop``: a next page that is the same page; ``endless``: pages without end), ``pad``
        (bytes of whitespace after each page), ``stall`` (seconds of silence after a file's headers)
        and ``fail_first`` (the first N file requests answer 503).
        """
        entry = self.repos[(kind, repo)]
        entry["hostile"] = answers
        if page_size is not None:
            entry["page_size"] = page_size
        self._write_spec()

    def replace(self, repo: str, commit: str, path: str, data: bytes | None, *, kind: str = "model") -> None:
        """Change (or, with None, remove) a file at an existing commit: what an origin must never do."""
        entry = self.repos[(kind, repo)]
        if data is None:
            del entry["commits"][commit][path]
        else:
            self._store(entry, commit, path, (data, entry["commits"][commit][path].get("lfs", False)))
        self._write_spec()

    def _store(self, entry: dict, commit: str, path: str, value: object) -> None:
        if isinstance(value, Unserved):
            entry["commits"][commit][path] = {"lfs": True, "size": value.size, "sha256": value.sha256}
            return
        data, lfs = value if isinstance(value, tuple) else (value, False)
        if not lfs and len(data) <= 4096:  # small files ride inline: many of them cost no disk
            entry["commits"][commit][path] = {"data": base64.b64encode(data).decode()}
            return
        self._version += 1
        source = self.root / "data" / f"{self._version}-{hashlib.sha256(data).hexdigest()[:16]}"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_bytes(data)
        entry["commits"][commit][path] = {"file": str(source), "lfs": lfs}

    def _write_spec(self) -> None:
        spec = self.root / "hub-spec.json"
        spec.parent.mkdir(parents=True, exist_ok=True)
        tmp = spec.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": self._version, "repos": list(self.repos.values())}))
        tmp.replace(spec)
        # The server reloads on a new mtime; make sure it is new even within one clock tick.
        self._version += 1
        os.utime(spec, ns=(time.time_ns(), time.time_ns() + self._version))

    def start(self) -> LoopbackHub:
        self._write_spec()
        port_file = self.root / "hub-ports.json"
        port_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "tests.hub_server", "--spec", str(self.root / "hub-spec.json")]
        cmd += ["--port-file", str(port_file)] + (["--rate", str(self.rate)] if self.rate else [])
        self.process = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1])
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the loopback Hub did not start")
            time.sleep(0.02)
        self.ports = json.loads(port_file.read_text())
        return self

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.endpoint}/_stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# The repositories the Hub tests pin and fetch (tests/test_hub.py, tests/add/): the conftest's ``hub``.
TOKEN = "hf_bakeTestToken0123456789abcdefXYZ"
CONFIG = b'{"model_type": "bert", "hidden_size": 8}\n'
LFS_DATA = hashlib.sha256(b"weights").digest() * (64 * 1024)  # 2 MiB, served by the CDN


def tiny_hub(root: Path) -> LoopbackHub:
    """A LoopbackHub (not started) holding org/old, org/tiny (an LFS file), org/gated (TOKEN), org/table."""
    server = LoopbackHub(root)
    server.commit("org/old", {"config.json": b"{}\n"}, ref=None)
    server.commit(
        "org/tiny",
        {
            "config.json": CONFIG,
            "tokenizer/vocab.txt": b"[PAD]\n[UNK]\nhello\n",
            "same.json": CONFIG,  # one blob behind two snapshot files
            "model.safetensors": (LFS_DATA, True),
        },
        ref="main",
    )
    server.commit(
        "org/gated", {"config.json": b'{"gated": true}\n', "w.bin": (LFS_DATA[:65536], True)}, token=TOKEN
    )
    server.commit("org/table", {"data/train.csv": b"a,b\n1,2\n", "README.md": b"# ds\n"}, kind="dataset")
    return server


def bake_add(manifest: Path, env: dict, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``bake add ARGS --manifest MANIFEST`` in ``env``; with ``ok``, the test fails unless it exits 0."""
    proc = bake("add", *args, "--manifest", str(manifest), env=env)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--rate", type=float, help="CDN bytes per second per connection")
    args = parser.parse_args(argv)
    server, cdn = serve(args.spec, args.rate)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ports = {"hub": server.port, "cdn": cdn.port, "pid": os.getpid()}
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    tmp.replace(args.port_file)
    stop.wait()
    server.stop()
    cdn.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Loopback HTTP mirror for tests and benchmarks: Range, ETag, per-connection throttle and scripted faults.

In tests::

    with Mirror({"/a.bin": data}) as m:
        m.script("/a.bin", http_error(503), reset(1000))  # 503, then a reset, then normal
        m.url("/a.bin"), m.requests["/a.bin"], m.bytes_sent["/a.bin"]

As a script (image builds, benchmarks), serving a directory until SIGTERM::

    python -m tests.mirror --root DIR [--port N] [--port-file F] [--rate BYTES_PER_S]
                           [--no-range] [--drop-at FRACTION] [--stats-file F]

It binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import base64
import collections
import email.utils
import gzip
import hashlib
import json
import os
import re
import signal
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

KIB = 1024
CHUNK = 64 * KIB
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_FLIP = bytes(range(255, -1, -1))


@dataclass(frozen=True)
class Fault:
    """What to do to one request. Build them with the helpers below."""

    kind: str
    status: int = 0
    offset: int = 0
    seconds: float = 0.0
    retry_after: str | None = None
    location: str = ""
    data: bytes = b""
    delta: int = 0
    rate: float = 0.0
    total: int = 0


def ok() -> Fault:
    """Serve the request normally (a placeholder in a script)."""
    return Fault("ok")


def http_error(status: int, retry_after: str | None = None) -> Fault:
    """Answer with ``status`` (and a Retry-After header when given)."""
    return Fault("status", status=status, retry_after=retry_after)


def reset(offset: int) -> Fault:
    """Send ``offset`` body bytes, then reset the connection (RST)."""
    return Fault("reset", offset=offset)


def stall(offset: int, seconds: float) -> Fault:
    """Send ``offset`` body bytes, then go silent for ``seconds`` and close."""
    return Fault("stall", offset=offset, seconds=seconds)


def truncate(offset: int) -> Fault:
    """Promise the full length, send ``offset`` bytes, then close cleanly (FIN)."""
    return Fault("truncate", offset=offset)


def wrong_bytes() -> Fault:
    """Serve the right length with every byte flipped."""
    return Fault("wrong_bytes")


def length_lie(delta: int) -> Fault:
    """Send a Content-Length ``delta`` bytes off the truth, the true body, then close."""
    return Fault("length_lie", delta=delta)


def no_length(cut_at: int = 0) -> Fault:
    """Answer 200 without Content-Length, ending the body by closing (after ``cut_at`` bytes if set)."""
    return Fault("no_length", offset=cut_at)


def ignore_range() -> Fault:
    """Answer a ranged request with 200 and the whole file."""
    return Fault("ignore_range")


def bad_range(shift: int = 1) -> Fault:
    """Answer with 206 but a Content-Range whose start is off by ``shift``."""
    return Fault("bad_range", delta=shift)


def replace(offset: int, data: bytes) -> Fault:
    """Send ``offset`` bytes, then replace the file with ``data`` (new ETag) and reset the connection."""
    return Fault("replace", offset=offset, data=data)


def redirect(location: str, status: int = 302) -> Fault:
    """Redirect this request to ``location``."""
    return Fault("redirect", status=status, location=location)


def flip(offset: int) -> Fault:
    """Serve the right length with only the file's byte at ``offset`` changed (if this response covers it)."""
    return Fault("flip", offset=offset)


def hang(seconds: float) -> Fault:
    """Read the request, then send nothing at all (not even a status line) for ``seconds`` and close."""
    return Fault("hang", seconds=seconds)


def garbage() -> Fault:
    """Answer with a line that is not HTTP, then close."""
    return Fault("garbage")


def trickle(rate: float) -> Fault:
    """Serve this response at ``rate`` bytes/s in 1 KiB writes: never silent for long, yet slow."""
    return Fault("trickle", rate=rate)


def etag_flap() -> Fault:
    """Serve the right bytes under a one-off ETag, as a CDN whose nodes disagree about the validator."""
    return Fault("etag_flap")


def claim_size(total: int) -> Fault:
    """Claim ``total`` bytes long (Content-Length, Content-Range), send the real ones, close."""
    return Fault("claim_size", total=total)


def range_mismatch() -> Fault:
    """Answer a ranged request with 206 and the whole file, truthfully labelled: not the range asked for."""
    return Fault("range_mismatch")


def gzip_body() -> Fault:
    """Serve the whole file gzip-compressed with Content-Encoding: gzip, whatever Accept-Encoding said."""
    return Fault("gzip")


def endless() -> Fault:
    """Answer 200 with no Content-Length and stream bytes until the client goes away: a file with no end."""
    return Fault("endless")


# Last-Modified dates handed out by Mirror.add: one second apart, so a replaced file always gets a new one.
_modified_clock = iter(range(1_500_000_000, 2**40))


class _Abort(Exception):
    """The handler cut the connection on purpose."""


@dataclass
class _File:
    data: bytes | None
    path: Path | None
    etag: str
    modified: str = ""

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.path.stat().st_size

    def read(self, start: int, n: int) -> bytes:
        if self.data is not None:
            return self.data[start : start + n]
        with open(self.path, "rb") as fh:
            return os.pread(fh.fileno(), n, start)


class Mirror:
    """A ThreadingHTTPServer on 127.0.0.1 serving a dict of files and/or a directory.

    Counters (``requests``, ``bytes_sent``, per path) are server-side truth;
    ``log`` holds one dict per request with its path, Range, If-Range and
    Authorization headers and the status sent.

    ``basic_auth=(user, password)`` answers 401 to any request without those
    credentials; ``etag=False, last_modified=True`` makes a server whose only
    validator is Last-Modified (If-Range then compares dates).
    """

    def __init__(
        self,
        files: dict[str, bytes] | None = None,
        root: Path | None = None,
        *,
        rate: float | None = None,
        ranges: bool = True,
        tls: tuple[str, str] | None = None,
        port: int = 0,
        basic_auth: tuple[str, str] | None = None,
        etag: bool = True,
        last_modified: bool = False,
    ) -> None:
        self.root = Path(root) if root else None
        self.basic_auth = (
            "Basic " + base64.b64encode(":".join(basic_auth).encode()).decode() if basic_auth else None
        )
        self.etag = etag
        self.last_modified = last_modified
        self.rate = rate
        self.ranges = ranges
        self.tls = tls
        self.port = port
        self.lock = threading.Lock()
        self.files: dict[str, _File] = {}
        self.faults: dict[str, collections.deque[Fault]] = collections.defaultdict(collections.deque)
        self.redirects: dict[str, str] = {}
        self.endless: set[str] = set()  # paths that stream forever, on every request
        self.hub: dict[str, tuple[str, str | None, str]] = {}
        self.drops: dict[str, float] = {}
        self.requests: collections.Counter[str] = collections.Counter()
        self.bytes_sent: collections.Counter[str] = collections.Counter()
        self.log: list[dict] = []
        self.stopping = threading.Event()
        self._senders: dict[str, set] = collections.defaultdict(set)  # handlers sending a body, per path
        self._doomed: set = set()  # handlers to reset at their next chunk (drop_at)
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        for path, data in (files or {}).items():
            self.add(path, data)

    # -- content and faults -------------------------------------------------

    def add(self, path: str, data: bytes) -> None:
        """Serve ``data`` at ``path`` with a fresh ETag."""
        with self.lock:
            self.files[path] = _File(
                data,
                None,
                f'"{hashlib.sha256(data).hexdigest()[:16]}-{time.monotonic_ns()}"',
                email.utils.formatdate(next(_modified_clock), usegmt=True),
            )

    def remove(self, path: str) -> None:
        """Stop serving ``path`` (its pending faults go too)."""
        with self.lock:
            self.files.pop(path, None)
            self.faults.pop(path, None)

    def pending(self, path: str) -> int:
        """How many scripted faults for ``path`` no request has met yet."""
        with self.lock:
            return len(self.faults.get(path, ()))

    def script(self, path: str, *faults: Fault) -> None:
        """Queue faults for the next requests to ``path``, one per request; then it serves normally."""
        with self.lock:
            self.faults[path].extend(faults)

    def redirect(self, path: str, location: str) -> None:
        """Always redirect ``path`` to ``location`` (302)."""
        self.redirects[path] = location

    def add_endless(self, path: str) -> None:
        """Serve ``path`` as a body that never ends, on every request (the fault ``endless`` each time)."""
        self.endless.add(path)

    def drop_at(self, path: str, fraction: float = 0.5) -> None:
        """Reset every open connection for ``path`` once, when its bytes sent first cross ``fraction``."""
        self.drops[path] = fraction

    def add_hub_file(
        self,
        repo_id: str,
        revision: str,
        filename: str,
        data: bytes,
        *,
        cdn: Mirror | None = None,
        token: str | None = None,
    ) -> str:
        """Serve a Hub-style ``/{repo_id}/resolve/{revision}/{filename}`` that 302s to a content path.

        The content lives on ``cdn`` (another Mirror) or on this one. With
        ``token``, the resolve endpoint answers 401 without ``Bearer <token>``.
        Returns the content path.
        """
        sha = hashlib.sha256(data).hexdigest()
        blob = f"/_cdn/{sha}"
        (cdn or self).add(blob, data)
        location = cdn.url(blob) if cdn else blob
        self.hub[f"/{repo_id}/resolve/{revision}/{filename}"] = (location, token, sha)
        return blob

    def reset_counters(self) -> None:
        with self.lock:
            self.requests.clear()
            self.bytes_sent.clear()
            self.log.clear()

    def _next_fault(self, path: str) -> Fault:
        with self.lock:
            if path in self.endless:
                return endless()
            queue = self.faults.get(path)
            return queue.popleft() if queue else ok()

    def _lookup(self, path: str) -> _File | None:
        with self.lock:
            found = self.files.get(path)
        if found is not None or self.root is None:
            return found
        candidate = (self.root / path.lstrip("/")).resolve()
        if not candidate.is_relative_to(self.root.resolve()) or not candidate.is_file():
            return None
        st = candidate.stat()
        return _File(
            None,
            candidate,
            f'"{st.st_size:x}-{st.st_mtime_ns:x}"',
            email.utils.formatdate(st.st_mtime, usegmt=True),
        )

    # -- lifecycle ------------------------------------------------------------

    @property
    def base_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def start(self) -> Mirror:
        handler = type("Handler", (_Handler,), {"mirror": self})
        server = _Server(("127.0.0.1", self.port), handler)
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self.lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Mirror:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict:
        with self.lock:
            return {"requests": dict(self.requests), "bytes_sent": dict(self.bytes_sent)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients that cut connections are the point of this server; only report real bugs."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mirror: Mirror

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.tokens = float(CHUNK)
        self.last = time.monotonic()
        with self.mirror.lock:
            self.mirror._connections.add(self.connection)

    def finish(self) -> None:
        with self.mirror.lock:
            self.mirror._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:
        try:
            self._serve()
        except (_Abort, OSError):
            self.close_connection = True

    def _record(self, path: str, status: int) -> None:
        with self.mirror.lock:
            self.mirror.requests[path] += 1
            self.mirror.log.append(
                {
                    "path": path,
                    "status": status,
                    "range": self.headers.get("Range"),
                    "if_range": self.headers.get("If-Range"),
                    "authorization": self.headers.get("Authorization"),
                    "via_proxy": self.path.startswith("http"),
                }
            )

    def _simple(
        self, path: str, status: int, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> None:
        self._record(path, status)
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        mirror = self.mirror
        path = unquote(urlsplit(self.path).path)
        if mirror.basic_auth and self.headers.get("Authorization") != mirror.basic_auth:
            self._simple(path, 401, {"WWW-Authenticate": 'Basic realm="mirror"'}, b"unauthorized")
            return
        if path in mirror.hub:
            location, token, sha = mirror.hub[path]
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                self._simple(path, 401, body=b"unauthorized")
                return
            self._simple(
                path, 302, {"Location": location, "X-Repo-Commit": "0" * 40, "X-Linked-Etag": f'"{sha}"'}
            )
            return
        if path in mirror.redirects:
            self._simple(path, 302, {"Location": mirror.redirects[path]})
            return
        fault = mirror._next_fault(path)
        if fault.kind == "hang":
            self._record(path, 0)
            mirror.stopping.wait(fault.seconds)
            raise _Abort()
        if fault.kind == "garbage":
            self._record(path, 0)
            self.wfile.write(b"SSH-2.0-not-http\r\n\r\n")
            self.connection.shutdown(socket.SHUT_WR)
            raise _Abort()
        if fault.kind == "status":
            extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            self._simple(path, fault.status, extra, b"scripted failure")
            return
        if fault.kind == "redirect":
            self._simple(path, fault.status, {"Location": fault.location})
            return
        if fault.kind == "endless":
            self._endless(path)
        entry = mirror._lookup(path)
        if entry is None:
            self._simple(path, 404, body=b"not found")
            return
        if fault.kind == "gzip":
            self._simple(
                path,
                200,
                {"Content-Encoding": "gzip", **self._validators(entry)},
                gzip.compress(entry.read(0, entry.size)),
            )
            return
        if fault.kind == "claim_size":
            self._claim_size(path, entry, fault.total)
            return
        size = entry.size
        start, end, status = 0, size, 200
        wanted = _RANGE.match(self.headers.get("Range", "").strip())
        if_range = self.headers.get("If-Range")
        ranged = mirror.ranges and fault.kind not in ("ignore_range", "no_length")
        current = {None}
        current |= {entry.etag} if mirror.etag else set()
        current |= {entry.modified} if mirror.last_modified else set()
        if wanted and ranged and if_range in current:
            first = int(wanted.group(1))
            if first >= size:
                self._simple(path, 416, {"Content-Range": f"bytes */{size}"})
                return
            last = min(int(wanted.group(2)), size - 1) if wanted.group(2) else size - 1
            start, end, status = first, last + 1, 206
            if fault.kind == "range_mismatch":
                start, end = 0, size
        self._record(path, status)
        self.send_response(status)
        if fault.kind != "no_length":
            lie = fault.delta if fault.kind == "length_lie" else 0
            self.send_header("Content-Length", str(end - start + lie))
        etag = entry.etag
        if fault.kind == "etag_flap":
            etag = f'{etag[:-1]}-flap{time.monotonic_ns()}"'
        for name, value in self._validators(entry, etag).items():
            self.send_header(name, value)
        if mirror.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            shift = fault.delta if fault.kind == "bad_range" else 0
            self.send_header("Content-Range", f"bytes {start + shift}-{end - 1 + shift}/{size}")
        if fault.kind in ("length_lie", "no_length"):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._send_body(path, entry, start, end, fault)

    def _endless(self, path: str) -> None:
        """200, close-delimited, validators as this mirror sends them; bytes until the client hangs up."""
        self._record(path, 200)
        self.send_response(200)
        if self.mirror.etag:
            self.send_header("ETag", '"endless"')
        if self.mirror.last_modified:
            self.send_header("Last-Modified", email.utils.formatdate(1_500_000_000, usegmt=True))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        block = bytes(range(256)) * (CHUNK // 256)
        while not self.mirror.stopping.is_set():
            self.wfile.write(block)
            self._count(path, len(block), 0)
        raise _Abort()

    def _validators(self, entry: _File, etag: str | None = None) -> dict[str, str]:
        """The ETag and/or Last-Modified headers this mirror sends for ``entry``."""
        out = {}
        if self.mirror.etag:
            out["ETag"] = etag or entry.etag
        if self.mirror.last_modified:
            out["Last-Modified"] = entry.modified
        return out

    def _claim_size(self, path: str, entry: _File, total: int) -> None:
        """Label the answer as ``total`` bytes long (or a range of them); send the real bytes there are."""
        wanted = _RANGE.match(self.headers.get("Range", "").strip())
        start, last, status = 0, total - 1, 200
        if wanted and self.mirror.ranges:
            start = int(wanted.group(1))
            last = min(int(wanted.group(2)), total - 1) if wanted.group(2) else total - 1
            status = 206
        self._record(path, status)
        self.send_response(status)
        self.send_header("Content-Length", str(last - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{last}/{total}")
        for name, value in self._validators(entry).items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        real_end = min(last + 1, entry.size)
        for pos in range(start, real_end, CHUNK):
            block = entry.read(pos, min(CHUNK, real_end - pos))
            self.wfile.write(block)
            self._count(path, len(block), entry.size)
        self.connection.shutdown(socket.SHUT_WR)
        raise _Abort()

    def _send_body(self, path: str, entry: _File, start: int, end: int, fault: Fault) -> None:
        mirror = self.mirror
        size = entry.size
        cut = fault.kind in ("reset", "stall", "truncate", "replace") or (
            fault.kind == "no_length" and fault.offset
        )
        limit = start + fault.offset if cut else end
        with mirror.lock:
            mirror._senders[path].add(self)
        try:
            pos = start
            while pos < min(end, limit):
                with mirror.lock:
                    doomed = self in mirror._doomed
                    mirror._doomed.discard(self)
                if doomed:
                    self._reset()
                n = min(KIB if fault.kind == "trickle" else CHUNK, min(end, limit) - pos)
                block = entry.read(pos, n)
                if fault.kind == "wrong_bytes":
                    block = block.translate(_FLIP)
                elif fault.kind == "flip" and pos <= fault.offset < pos + len(block):
                    i = fault.offset - pos
                    block = block[:i] + block[i : i + 1].translate(_FLIP) + block[i + 1 :]
                self._throttle(len(block), fault.rate or None)
                self.wfile.write(block)
                pos += len(block)
                self._count(path, len(block), size)
            if fault.kind == "reset":
                self._reset()
            elif fault.kind == "stall":
                mirror.stopping.wait(fault.seconds)
                raise _Abort()
            elif fault.kind in ("truncate", "length_lie", "no_length"):
                self.connection.shutdown(socket.SHUT_WR)
                raise _Abort()
            elif fault.kind == "replace":
                mirror.add(path, fault.data)
                self._reset()
        finally:
            with mirror.lock:
                mirror._senders[path].discard(self)

    def _count(self, path: str, n: int, size: int) -> None:
        mirror = self.mirror
        with mirror.lock:
            before = mirror.bytes_sent[path]
            mirror.bytes_sent[path] = before + n
            fraction = mirror.drops.get(path)
            if fraction is not None and before < fraction * size <= before + n:
                del mirror.drops[path]  # once
                mirror._doomed.update(mirror._senders[path])

    def _throttle(self, n: int, rate: float | None = None) -> None:
        rate = rate or self.mirror.rate
        if not rate:
            return
        now = time.monotonic()
        self.tokens = min(float(CHUNK), self.tokens + (now - self.last) * rate) - n
        self.last = now
        if self.tokens < 0:
            time.sleep(-self.tokens / rate)

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        raise _Abort()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mirror", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="directory to serve")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    parser.add_argument("--rate", type=float, help="throttle each connection to this many bytes/s")
    parser.add_argument("--no-range", action="store_true", help="ignore Range headers")
    parser.add_argument(
        "--drop-at",
        type=float,
        metavar="FRACTION",
        help="reset every connection of a file once when its bytes sent cross FRACTION of it",
    )
    parser.add_argument("--stats-file", type=Path, help="write per-path request and byte counts here on exit")
    args = parser.parse_args(argv)
    mirror = Mirror(root=args.root, rate=args.rate, ranges=not args.no_range, port=args.port)
    if args.drop_at is not None:
        for file in args.root.rglob("*"):
            if file.is_file():
                mirror.drop_at("/" + file.relative_to(args.root).as_posix(), args.drop_at)
    mirror.start()
    if args.port_file:
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(str(mirror._server.server_address[1]))
        tmp.replace(args.port_file)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(f"mirror: serving {args.root} at {mirror.base_url}", flush=True)
    done.wait()
    mirror.stop()
    if args.stats_file:
        args.stats_file.write_text(json.dumps(mirror.stats(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

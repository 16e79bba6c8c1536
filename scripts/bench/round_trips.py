"""Registry round trips of ``bake publish`` and ``bake pin`` (`scripts/bench.py --round-trips [OLD]`).

A selection of N small units is published into an empty repository of a throw-away registry, then
published again (everything present: only asked), then looked up as ``bake pin`` does. Between bake
and the registry sits a loopback proxy that holds every request for ``DELAY`` seconds before passing
it on, as a registry across a network would, and records it. For each phase it reports the requests
per unit and the wall time divided by the delay: the round trips the phase waited for one after the
other. The tree is written in Python as the ``assets`` stage would leave it (no image build), so the
figures are the registry's alone. With OLD (a commit), the same phases run on OLD's bake too (its
tree by git archive), so the table shows before and after side by side; old bakes asked through the
Docker engine, which the proxy sees as well.
"""

from __future__ import annotations

import hashlib
import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import REPO, log
from bench.compare import _checkout
from bench.engine import Registry

DELAY = 0.1  # seconds each request is held: one round trip to a registry across a network
UNIT_COUNTS = (1, 16)
FILE_BYTES = 64 << 10
PHASES = ("push", "ask", "pin")

# Run with PYTHONPATH set to the bake under test: the three phases, each timed, on one selection.
_DRIVER = r"""
import json, os, sys, tarfile, time, io, inspect
from pathlib import Path
from bake import publish

manifest, repo = Path(sys.argv[1]), sys.argv[2]
files = json.loads(Path(sys.argv[3]).read_text())
chosen = publish.selection_of(manifest, repo, [])

def build(tree):
    with tarfile.open(tree, "w", format=tarfile.GNU_FORMAT) as tar:
        def add(name, data=None):
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o555
            else:
                info.mode, info.size = 0o444, len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
        for d in ("opt", "opt/bake", "opt/bake/assets", "opt/bake/assets/bench"):
            add(d)
        for path, text in files.items():
            add(f"opt/bake/assets/{path}", bytes.fromhex(text))
        add("opt/bake/assets/bake.lock.json", json.dumps(sorted(files)).encode())

def mark(phase):
    print(json.dumps({"phase": phase, "at": time.time()}), flush=True)

mark("push")
publish.publish_selection(chosen, build)
mark("ask")
publish.publish_selection(chosen, build)
mark("pin")
publish.lookup_block(manifest, repo, [], "bake publish")
mark("end")
"""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # clients open many connections at once


class DelayingProxy:
    """A loopback HTTP proxy: each request waits ``delay``, then goes to ``upstream``, and is logged."""

    def __init__(self, upstream: str, delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self.requests: list[tuple[float, str, str, int]] = []  # (time, method, path, status)
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _body(self) -> bytes | None:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0], 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    self.rfile.readline()
                    return b"".join(chunks)
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            def _forward(self) -> None:
                body = self._body()
                time.sleep(proxy.delay)
                # Header by header: a client may send several Accept lines, and the registry reads them all.
                skip = ("transfer-encoding", "content-length", "host")
                headers = [(k, v) for k, v in self.headers.items() if k.lower() not in skip]
                conn = http.client.HTTPConnection(proxy.upstream, timeout=300)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    conn.putheader("Host", self.headers.get("Host", proxy.upstream))
                    for key, value in headers:
                        conn.putheader(key, value)
                    if body is not None:
                        conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                with proxy.lock:
                    proxy.requests.append((time.time(), self.command, self.path, answer.status))
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # A HEAD answer's length is the GET's: clients size what they fetch next by it.
                length = answer.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

        return Handler

    def __enter__(self) -> DelayingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _selection(work: Path, units: int) -> tuple[Path, dict[str, str]]:
    """A manifest of ``units`` files (one unit each) and their bytes, as hex."""
    files, entries = {}, []
    for i in range(units):
        data = os.urandom(FILE_BYTES)
        path = f"bench/file-{i:03}.bin"
        files[path] = data.hex()
        sha = hashlib.sha256(data).hexdigest()
        entries.append(
            f'[[asset]]\nname = "file-{i:03}"\npath = "{path}"\nsha256 = "{sha}"\nsize = {len(data)}\n'
            f'urls = ["https://example.invalid/{path}"]\n'
        )
    manifest = work / f"units-{units}.toml"
    manifest.write_text("\n".join(entries))
    return manifest, files


def _phases(tree: Path, proxy: DelayingProxy, repo: str, manifest: Path, files: dict, logs: Path) -> dict:
    """Run the driver on ``tree``'s bake; return each phase's requests and round trips (wall / delay)."""
    start = len(proxy.requests)
    listing = manifest.with_suffix(".json")
    listing.write_text(json.dumps(files))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # cwd=tree: `python -c` puts the working directory first on sys.path, before PYTHONPATH.
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(manifest), f"{proxy.host}/{repo}", str(listing)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    (logs / f"round-trips-{repo.replace('/', '_')}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"the round-trip driver failed on {tree}: {proc.stderr[-2000:]}")
    marks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    found = {}
    requests = proxy.requests[start:]
    for mark, after in itertools.pairwise(marks):
        seen = [r for r in requests if mark["at"] <= r[0] < after["at"]]
        seconds = after["at"] - mark["at"]
        found[mark["phase"]] = {
            "requests": len(seen),
            "seconds": round(seconds, 3),
            "round_trips": round(seconds / proxy.delay, 1),
        }
    return found


def bench_round_trips(work: Path, logs: Path, old: str | None = None) -> dict:
    """Measure 13: per bake (this checkout, and OLD when given), units and phase: requests and round trips."""
    trees = {"new": REPO}
    if old:
        trees = {"old": _checkout(old, work / "old", ""), **trees}
    store = Registry(work, logs, level="info")
    store.start()
    rows = []
    try:
        with DelayingProxy(store.host, DELAY) as proxy:
            for units in UNIT_COUNTS:
                manifest, files = _selection(work, units)
                for name, tree in trees.items():
                    repo = f"round-trips/{name}-{units}"
                    phases = _phases(tree, proxy, repo, manifest, files, logs)
                    rows.append({"bake": name, "units": units, **phases})
                    log(f"round trips: {name} bake, {units} unit(s): {phases}")
    finally:
        store.stop()
    return {"delay_seconds": DELAY, "old": old, "rows": rows}


def round_trips_table(found: dict) -> str:
    """A Markdown table: per bake and unit count, each phase's requests per unit and round trips."""
    delay_ms = found["delay_seconds"] * 1000
    lines = [
        f"every request held {delay_ms:.0f} ms; round trips = wall time / {delay_ms:.0f} ms",
        "",
        "| bake | units | " + " | ".join(f"{p}: requests / unit, round trips" for p in PHASES) + " |",
        "|---|---:|" + "---:|" * len(PHASES),
    ]
    for row in found["rows"]:
        name = f"old ({found['old']})" if row["bake"] == "old" else "this checkout"
        cells = [f"{row[p]['requests'] / row['units']:.1f}, {row[p]['round_trips']:.1f}" for p in PHASES]
        lines.append(f"| {name} | {row['units']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

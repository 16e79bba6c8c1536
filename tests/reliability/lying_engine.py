"""A Docker engine stand-in on a unix socket that claims every pull works, for the tests of what bake never
pulls (harvest --diff's ROOT, bake.testing's image)."""

from __future__ import annotations

import json
import re
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path


class LyingEngine:
    """A Docker engine stand-in on a unix socket: it has no image, claims every pull works, records all."""

    def __init__(self, sock: Path) -> None:
        self.sock = sock
        self.calls: list[str] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def address_string(self) -> str:
                return "unix"

            def _answer(self) -> None:
                engine.calls.append(f"{self.command} {self.path}")
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
                if path == "/_ping":
                    return self._send(200, b"OK", "text/plain")
                if path == "/version":
                    return self._send(200, json.dumps({"ApiVersion": "1.45", "Version": "26.1.5"}).encode())
                if path == "/images/create":  # the lie: every pull "works"
                    return self._send(200, json.dumps({"status": "Downloaded newer image"}).encode())
                return self._send(404, json.dumps({"message": f"No such image: {path}"}).encode())

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = do_DELETE = _answer

        self.server = socketserver.ThreadingUnixStreamServer(str(sock), Handler)
        self.server.daemon_threads = True

    def __enter__(self) -> LyingEngine:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

"""The one loopback HTTP server of the test suites: 127.0.0.1, a free port, threads, a clean stop.

Every suite's server is this class with a handler of its own: the mirror (files, ranges,
faults, auth, TLS), the Hub and its CDN, proxies, scripted answers and registries.
"""

from __future__ import annotations

import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer bound to 127.0.0.1 only, serving from a daemon thread once started."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # clients that open many connections at once (bake's registry client)

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], *, port: int = 0, tls: tuple[str, str] | None = None
    ) -> None:
        super().__init__(("127.0.0.1", port), handler)
        self.tls = tls
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.socket = context.wrap_socket(self.socket, server_side=True)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def start(self) -> LoopbackServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients that cut connections are the point of these servers; only report real bugs."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

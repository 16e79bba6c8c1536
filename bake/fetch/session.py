"""What every transfer of one run shares: the options, the TLS context, and the switch that stops them all."""

from __future__ import annotations

import ssl
import threading
from typing import Protocol

from bake.fetch.failures import Cancelled
from bake.fetch.options import FetchOptions
from bake.fetch.transport import make_ssl_context


class Stoppable(Protocol):
    """A running transfer, as far as cancelling it goes."""

    def fail(self, exc: BaseException) -> None: ...


class Session:
    """The run's shared state: options, one TLS context made on first use, and the transfers in flight."""

    def __init__(self, options: FetchOptions) -> None:
        self.options = options
        self.cancel = threading.Event()
        self._lock = threading.Lock()  # guards _ssl and _transfers
        self._ssl: ssl.SSLContext | None = None
        self._transfers: set[Stoppable] = set()

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context (ca_bundle, else SSL_CERT_FILE, else the system store), made on first use."""
        with self._lock:
            if self._ssl is None:
                self._ssl = make_ssl_context(self.options)
            return self._ssl

    def register(self, transfer: Stoppable) -> None:
        with self._lock:
            self._transfers.add(transfer)
        if self.cancel.is_set():
            transfer.fail(Cancelled("interrupted"))

    def unregister(self, transfer: Stoppable) -> None:
        with self._lock:
            self._transfers.discard(transfer)

    def cancel_all(self) -> None:
        self.cancel.set()
        with self._lock:
            transfers = list(self._transfers)
        for transfer in transfers:
            transfer.fail(Cancelled("interrupted"))

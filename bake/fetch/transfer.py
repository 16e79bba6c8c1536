"""One attempt's transfer into the partial: the first stream, helper connections that claim and steal pieces.

A transfer does not speak HTTP: a helper connection is anything that can fetch
a claim's bytes (``PieceConnection``). It knows the partial it writes into, and
it can be stopped from any thread with ``fail``, which shuts the sockets of the
HTTP connections its clients registered with it (``add_connection``), so that a
read blocked in the kernel returns at once.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable
from typing import Protocol

from bake.errors import DownloadError
from bake.fetch.failures import Aborted
from bake.fetch.partial import PartialFile
from bake.fetch.segments import NOT_YET, READ_BUF, Claim, ClaimQueue, piece_size
from bake.fetch.transport import Validators

SAVE_EVERY = 0.25  # seconds between progress-file writes: a SIGKILL loses at most this much transfer

Reader = Callable[[memoryview], int]  # readinto: fills the view, returns the bytes read, 0 at the end


class PieceConnection(Protocol):
    """One connection that can fetch byte ranges of the transfer's source."""

    def fetch(self, claim: Claim) -> Reader:
        """Ask for bytes ``claim.pos``..``claim.end - 1``; return a reader of the body."""

    def end_piece(self) -> None:
        """Drop the connection if the last body was not read to its end (a stolen tail)."""

    def close(self) -> None: ...


class Transfer:
    """One attempt at one source, shared by its connections: claims, connections to cut, the first error."""

    def __init__(self, partial: PartialFile, advance: Callable[[int], None]) -> None:
        self.partial = partial
        self.advance = advance  # told the bytes of each write, for progress
        self.lock = partial.lock  # also guards ``conns`` and ``error``
        self.queue = ClaimQueue(self.lock)
        self.size: int | None = None
        self.url = ""  # where the probe landed after redirects; helpers ask there
        self.validators = Validators()  # the version the probe saw; every piece must be of it
        self.conns: set[http.client.HTTPConnection] = set()
        self.abort = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    # -- what an HTTP client needs (transport.ConnectionSet) --------------------

    def add_connection(self, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            self.conns.add(conn)

    def drop_connection(self, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            self.conns.discard(conn)

    def aborted(self) -> bool:
        return self.abort.is_set()

    def fail(self, exc: BaseException) -> None:
        """Record the first real error and stop every connection of this transfer."""
        with self.lock:
            if self.error is None and not isinstance(exc, Aborted):
                self.error = exc
            conns = list(self.conns)
        self.abort.set()
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # -- planning ---------------------------------------------------------------

    def plan(self, size: int, first: Claim, connections: int) -> None:
        """Split every hole of the partial except what ``first`` covers into pieces for ``connections``."""
        with self.lock:
            holes = self.partial.written.holes(size)
        self.size = size
        self.queue.plan(holes, first, piece_size(size, connections))

    def single(self, size: int | None, first: Claim) -> None:
        """One stream fills the file: ``first`` is the only claim."""
        self.size = size
        self.queue.add(first)

    # -- running ----------------------------------------------------------------

    def run(
        self,
        first: Claim,
        read: Reader,
        *,
        connection: PieceConnection | None = None,
        open_connection: Callable[[], PieceConnection] | None = None,
        helpers: int = 0,
    ) -> None:
        """Stream ``first`` here while up to ``helpers`` new connections take other pieces; save progress.

        ``connection`` (the one ``read`` comes from) takes pieces too once
        ``first`` is done. Raises the first error of any connection, or a
        DownloadError when bytes are missing at the end.
        """
        keeper = threading.Thread(target=self._keep, name="bake-keeper", daemon=True)
        keeper.start()
        threads = []
        if open_connection is not None:
            extra = min(helpers, self.queue.pending_pieces())
            threads = [
                threading.Thread(target=self._helper, args=(open_connection,), name="bake-conn", daemon=True)
                for _ in range(extra)
            ]
            for thread in threads:
                thread.start()
        try:
            self.stream(first, read)
            self.queue.release(first)
            if connection is not None:
                connection.end_piece()
                self._work(connection)
        except BaseException as exc:
            self.fail(exc)
        finally:
            for thread in threads:
                thread.join()
            self.finished.set()
            keeper.join()
        self._check_complete(first)
        self.partial.save()
        if self.error is not None:
            raise self.error

    def _check_complete(self, first: Claim) -> None:
        if self.error is not None:
            return
        with self.lock:
            if self.size is None:  # the body's end was the file's end
                self.size = first.pos
                self.partial.state.size = first.pos
            missing = self.partial.written.holes(self.size)
        if missing:
            self.error = DownloadError(
                f"transfer ended with {sum(b - a for a, b in missing)} bytes missing", retryable=True
            )

    def _keep(self) -> None:
        """Hash the completed prefix and save progress every SAVE_EVERY seconds until the transfer ends."""
        try:
            while not self.finished.wait(SAVE_EVERY):
                self.partial.checkpoint()
        except BaseException as exc:
            self.fail(exc)

    def _helper(self, open_connection: Callable[[], PieceConnection]) -> None:
        connection = open_connection()
        try:
            self._work(connection)
        except BaseException as exc:
            self.fail(exc)
        finally:
            connection.close()

    def _work(self, connection: PieceConnection) -> None:
        """Take pieces (or halves of slow ones) until none is left; fill each over ``connection``."""
        while not self.abort.is_set() and (claim := self.queue.take()) is not None:
            if claim is NOT_YET:
                self.abort.wait(0.05)
                continue
            try:
                self.stream(claim, connection.fetch(claim))
                connection.end_piece()
            finally:
                self.queue.release(claim)

    def stream(self, claim: Claim, read: Reader) -> None:
        """Copy the body into the partial at the claim's offset until the claim is full (or EOF if open)."""
        buf = memoryview(bytearray(READ_BUF))
        write, advance = self.partial.write, self.advance  # once per read: no attribute lookups
        while True:
            if self.abort.is_set():
                raise Aborted()
            with self.lock:
                pos, end = claim.pos, claim.end
            if end is not None and pos >= end:
                return
            n = read(buf if end is None else buf[: min(READ_BUF, end - pos)])
            if not n:
                if end is None:
                    return
                raise DownloadError(
                    f"the body ended early at byte {pos}, expected up to {end} (truncated)", retryable=True
                )
            write(claim, buf[:n], pos)
            advance(n)

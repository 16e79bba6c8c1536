"""file:// sources: a local file read under the asset's clock, even when the file blocks.

A FIFO with no writer, or a hung network filesystem, blocks open() or read()
in the kernel, where no timeout reaches. So a daemon thread does the opening
and reading, and the fetch waits for each answer at most the stall timeout, cut
short by the deadline; past it, the thread is abandoned, and closes the file if
the call ever returns. No library offers a timed read of a regular file.
"""

from __future__ import annotations

import errno
import os
import queue
import stat
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from bake.cache import PartialState
from bake.errors import DownloadError
from bake.fetch.attempt import Attempt, check_size
from bake.fetch.clock import Clock
from bake.fetch.failures import Aborted, Unusable
from bake.fetch.segments import Claim
from bake.fetch.transfer import Transfer
from bake.urls import redact_url

_T = TypeVar("_T")
_POLL = 0.1  # seconds between looks at the transfer's abort switch while a call is out


class LocalReader:
    """One file, opened and read by its own thread; every call waits at most the clock's I/O timeout."""

    def __init__(self, path: str, clock: Clock, abort: threading.Event) -> None:
        self.path = path
        self.clock = clock
        self.abort = abort
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._abandoned = threading.Event()
        self._fd: int | None = None  # owned by the thread
        threading.Thread(target=self._serve, name="bake-file", daemon=True).start()

    def open(self) -> int | None:
        """Open the file. Returns its size, or None for a FIFO or device, whose length nobody knows."""
        return self._call(self._open, "opening it")

    def readinto(self, view: memoryview) -> int:
        n = len(view)
        try:
            data = self._call(lambda: os.read(self._fd, n), "reading it")
        except OSError as exc:
            raise DownloadError(f"cannot read {self.path}: {exc.strerror or exc}", retryable=True) from None
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._calls.put(None)

    def _open(self) -> int | None:
        self._fd = os.open(self.path, os.O_RDONLY)
        st = os.fstat(self._fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.path)
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None and not self._abandoned.is_set():
            try:
                answer = (call(), None)
            except OSError as exc:
                answer = (None, exc)
            self._answers.put(answer)
        if self._fd is not None:
            os.close(self._fd)

    def _call(self, call: Callable[[], _T], doing: str) -> _T:
        """Run ``call`` on the file's thread; give up after the stall timeout or at the deadline."""
        self._calls.put(call)
        give_up = time.monotonic() + self.clock.io_timeout()
        while True:
            try:
                value, exc = self._answers.get(timeout=max(0.0, min(_POLL, give_up - time.monotonic())))
                break
            except queue.Empty:
                if not self.abort.is_set() and time.monotonic() < give_up:
                    continue
                self._abandoned.set()
                self._calls.put(None)  # the thread stops once the call returns, if ever
                if self.abort.is_set():
                    raise Aborted() from None
                raise self.clock.stall_error(f"{doing} ({self.path})") from None
        if exc is not None:
            raise exc
        return value


class FileAttempt(Attempt):
    """One read of a file:// source into the partial, from zero: a local copy is cheap.

    A file's end is its end and it has no Content-Encoding, so the flags keep their defaults.
    """

    def run(self) -> None:
        self.hooks.count_attempt()
        transfer = Transfer(self.partial, self.hooks.advance)
        self.session.register(transfer)  # so that Ctrl-C stops it
        reader = LocalReader(self.source.path, self.clock, transfer.abort)
        try:
            self._copy(transfer, reader)
        finally:
            reader.close()
            self.session.unregister(transfer)

    def _copy(self, transfer: Transfer, reader: LocalReader) -> None:
        """Open the file, check its size, and stream it into the partial from byte 0."""
        shown = redact_url(self.source.url)
        try:
            size = reader.open()
        except IsADirectoryError:
            raise Unusable(
                f"{shown} is a directory, not a file", advice="give the URL of the file itself"
            ) from None
        except OSError as exc:
            raise Unusable(
                f"{shown}: cannot read it ({exc.strerror or exc})",
                advice="check the path in the file:// URL, and that this user may read it",
            ) from None
        self.hooks.count_request()  # a read from a source, like an HTTP request
        if size is None:
            size = self.asset.size  # then an early end reads as truncation
        else:
            check_size(self.asset, self.source.url, size, retryable=False)
            self.partial.check_claim(size, shown)
        if self.partial.written_total():
            self.partial.discard()
        self.partial.state = PartialState(size=size, url=redact_url(self.source.url))
        self.hooks.begin(size)
        self.partial.ensure_room(self.asset.size)
        claim = Claim(0, size)
        transfer.single(size, claim)
        transfer.run(claim, reader.readinto)

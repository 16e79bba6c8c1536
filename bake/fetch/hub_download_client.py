"""huggingface_hub's HTTP client, with every request and answer of an attempt passing its guard first.

The client is huggingface_hub's own (its request hook, redirects followed); only
``_send_single_request`` is wrapped. It is the one method every request passes, through
the pooled transport and through a proxy's alike: a custom transport would miss the
proxy mounts httpx makes from HTTPS_PROXY. Outside an attempt (no guard) it is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

import httpx2
from huggingface_hub.utils._http import hf_request_event_hook

from bake.errors import DownloadError


class Guard(Protocol):
    """What the client asks of an attempt (bake.fetch.hub_download.Guard is one)."""

    clock: object

    def before(self, request: httpx2.Request) -> None: ...

    def check(self, response: httpx2.Response) -> None: ...

    def check_running(self) -> None: ...

    def advance(self, n: int) -> None: ...

    def body_limit(self) -> int: ...


class GuardedClient(httpx2.Client):
    """An httpx2 client whose every request, answer and body read passes the current guard."""

    def __init__(self, current: Callable[[], Guard | None], **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.current = current

    def _send_single_request(self, request: httpx2.Request) -> httpx2.Response:
        guard = self.current()
        if guard is None:
            return super()._send_single_request(request)
        guard.before(request)
        try:
            response = super()._send_single_request(request)
        except httpx2.TimeoutException:
            raise guard.clock.stall_error(f"waiting for {request.url.host}") from None
        except httpx2.TransportError as exc:
            raise DownloadError(
                f"cannot get {request.url}: {type(exc).__name__}: {exc}", retryable=True
            ) from None
        try:
            guard.check(response)
        except BaseException:
            response.close()
            raise
        response.stream = GuardedStream(response.stream, guard)
        return response


class GuardedStream(httpx2.SyncByteStream):
    """A body read under the guard: the deadline, Ctrl-C and a byte bound between chunks, bake's errors.

    huggingface_hub resumes and retries on httpx's own exceptions; bake's errors pass it by,
    so that bake's retry policy decides.
    """

    def __init__(self, inner: httpx2.SyncByteStream, guard: Guard) -> None:
        self.inner = inner
        self.guard = guard

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self.inner)
        limit, got = self.guard.body_limit(), 0
        while True:
            self.guard.check_running()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx2.TimeoutException:
                raise self.guard.clock.stall_error("reading the body") from None
            except httpx2.TransportError as exc:
                raise DownloadError(
                    f"connection broke: {type(exc).__name__}: {exc}", retryable=True
                ) from None
            got += len(chunk)
            if got > limit:  # a body without end would fill the staging directory's disk
                raise DownloadError(f"the answer ran past {limit} bytes, more than pinned", retryable=False)
            self.guard.advance(len(chunk))
            yield chunk

    def close(self) -> None:
        self.inner.close()


def factory(
    ssl_context: Callable[[], object], current: Callable[[], Guard | None]
) -> Callable[[], GuardedClient]:
    """A client factory for ``huggingface_hub.set_client_factory``: its default client, guarded."""

    def make() -> GuardedClient:
        return GuardedClient(
            current,
            event_hooks={"request": [hf_request_event_hook]},
            follow_redirects=True,
            timeout=None,
            verify=ssl_context(),
        )

    return make

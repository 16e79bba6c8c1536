"""One try at an HTTP source: a ranged probe, its status and Content-Range checked, then the transfer.

The probe asks for the first hole of the partial. A 206 is checked against
the partial's saved size and ETag and becomes a segmented transfer; a 200 is
the whole file over one stream; a 416 means the file changed (or is empty).
"""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from bake.asset import Asset
from bake.cache import PartialState
from bake.errors import DownloadError
from bake.fetch.clock import Clock
from bake.fetch.failures import Aborted, Changed, DeadlineExceeded, SizeMismatch
from bake.fetch.partial import PartialFile
from bake.fetch.segments import PROBE, Claim, piece_size
from bake.fetch.session import Session
from bake.fetch.sources import Source
from bake.fetch.transfer import Reader, Transfer
from bake.fetch.transport import (
    HttpClient,
    Validators,
    check_content_range,
    describe_error,
    parse_content_range,
)
from bake.urls import redact_url

log = logging.getLogger(__name__)


MAX_FILE_SIZE = 2**63 - 1  # the largest offset a file can have (off_t)


def check_size(asset: Asset, url: str, total: int, *, retryable: bool = True) -> None:
    """Raise DownloadError when a source's size differs from the manifest's, or no file can have it."""
    if total > MAX_FILE_SIZE:
        raise DownloadError(
            f"{redact_url(url)} claims {total} bytes, more than any file can hold (2^63 - 1); "
            "it is broken: use another mirror",
            retryable=False,
        )
    if asset.size is not None and total != asset.size:
        raise SizeMismatch(
            f"{redact_url(url)} serves {total} bytes; the manifest says size = {asset.size}",
            expected=asset.size,
            seen=total,
            retryable=retryable,
        )


def _content_encoding(resp: http.client.HTTPResponse) -> str | None:
    encoding = (resp.getheader("Content-Encoding") or "").strip()
    return None if encoding.lower() in ("", "identity") else encoding


def encoding_note(encoding: str) -> str:
    """Why bytes sent with a Content-Encoding (asked for identity) fail: they are the compressed ones."""
    return (
        f"it sent the file with Content-Encoding: {encoding}, although bake asked for identity, so these "
        "are encoded bytes, not the file; serve the file as stored, or use another mirror (not retried)"
    )


@dataclass(frozen=True, kw_only=True)
class AttemptHooks:
    """What an attempt tells its job: attempts, the transfer begun, bytes written, requests, ETag splits."""

    count_attempt: Callable[[], None]
    begin: Callable[[int | None], None]
    advance: Callable[[int], None]
    count_request: Callable[[], None]
    etag_split: Callable[[], None]
    changed: Callable[[str], None]  # the file was replaced mid-download: how it showed


@dataclass(frozen=True, kw_only=True)
class AttemptContext:
    """What every kind of try at a source shares: the source, the asset, its partial, clock, session, hooks.

    The job builds one for each try; the clock is the asset's, the session the run's.
    """

    source: Source
    asset: Asset
    partial: PartialFile
    clock: Clock
    session: Session
    hooks: AttemptHooks


class Attempt:
    """What one try at a source works with, and what it learnt about the body it got."""

    def __init__(self, context: AttemptContext) -> None:
        self.source = context.source
        self.asset = context.asset
        self.partial = context.partial
        self.clock = context.clock
        self.session = context.session
        self.hooks = context.hooks
        self.unsized = False  # the body had no length to check, so an early close looked like its end
        self.unvouched = False  # the length came from one Content-Length alone, which nothing confirmed
        self.encoding: str | None = None  # a Content-Encoding the server applied although asked not to

    def run(self) -> None:
        raise NotImplementedError

    def confirms_length(self, length: int) -> bool:
        """Does the source, asked once more, say the file is ``length`` bytes? (An unvouched length only.)"""
        return True


class HttpAttempt(Attempt):
    """One GET series against one source, over up to ``connections`` connections."""

    def __init__(self, context: AttemptContext, *, connections: int, unranged: bool = False) -> None:
        super().__init__(context)
        self.unranged = unranged  # ask for the whole file, no Range: the source answers ranges wrongly
        self.shown = redact_url(context.source.url)  # for messages and the progress record: no password
        self.connections = connections

    def client(self, transfer: Transfer) -> HttpClient:
        return HttpClient(
            timeouts=self.clock,
            connections=transfer,
            ssl_context=self.session.ssl_context,
            allow_http=self.session.options.allow_http,
            on_request=self.hooks.count_request,
        )

    def run(self) -> None:
        """Probe with a ranged GET, then fill the holes. Raises DownloadError (or Changed) on failure."""
        partial = self.partial
        size = partial.state.size if partial.state.size is not None else self.asset.size
        with partial.lock:
            holes = partial.written.holes(size) if size is not None else [(partial.written.prefix(), None)]
        if not holes:
            partial.state.size = size  # an empty file, or a partial complete before its size was saved
            return  # every byte is on disk already; verifying decides
        start, hole_end = holes[0]
        if self.unranged:  # the source answers ranges wrongly: one stream of the whole file, no Range
            self.connections, start, hole_end = 1, 0, None
        if self.connections == 1:
            probe_end = hole_end
        else:
            probe_end = min(hole_end or start + PROBE, start + piece_size(size, self.connections))
        transfer = Transfer(partial, self.hooks.advance)
        self.session.register(transfer)
        client = self.client(transfer)
        watchdog = self._watchdog(transfer)
        try:
            self.hooks.count_attempt()
            resp = self._probe(transfer, client, start, probe_end, size)
            if resp is not None:
                self._transfer(transfer, client, resp, start, probe_end)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            client.close()
            self.session.unregister(transfer)

    def confirms_length(self, length: int) -> bool:
        """Ask for the byte past ``length``, reading no body: does the source say the file has that length?

        A 416 whose Content-Range names that size says so, and so does a 200 (a source that ignores
        ranges) whose Content-Length is it: a second answer agreeing with the first. A body whose
        length only one Content-Length gave may have been cut short by a wrong one; then the source
        answers otherwise (a 206 with the rest), and the file did not come whole. A failure is no answer.
        """
        transfer = Transfer(self.partial, lambda nbytes: None)
        self.session.register(transfer)
        client = self.client(transfer)
        try:
            resp, _ = client.request(self.source, self.source.http_url, {"Range": f"bytes={length}-"})
            if resp.status == 416:
                return parse_content_range(resp.getheader("Content-Range"))[2] == length
            return resp.status == 200 and resp.length == length
        except (DownloadError, Aborted, OSError, ValueError):
            return False
        finally:
            client.close()  # the body, if any, is never read
            self.session.unregister(transfer)

    def _probe(
        self, transfer: Transfer, client: HttpClient, start: int, probe_end: int | None, size: int | None
    ) -> http.client.HTTPResponse | None:
        """Send the first request. Returns its response, or None when a 416 showed an empty file."""
        state = self.partial.state
        last = "" if probe_end is None or probe_end == size else str(probe_end - 1)
        headers = {} if self.unranged else {"Range": f"bytes={start}-{last}"}
        saved = Validators(state.etag, state.modified).if_range()
        if start and saved and state.url == self.shown and not self.unranged:
            headers["If-Range"] = saved
        try:
            resp, transfer.url = client.request(self.source, self.source.http_url, headers)
        except Aborted:
            raise transfer.error from None  # the watchdog or Ctrl-C cut the connection
        if resp.status != 416:
            return resp
        client.close()
        total = parse_content_range(resp.getheader("Content-Range"))[2]
        if total == 0 and start == 0:
            check_size(self.asset, self.source.url, 0)
            self.partial.state = PartialState(size=0, url=self.shown)
            return None
        raise Changed(
            f"{self.shown} cannot serve bytes from {start} (HTTP 416, size {total}); "
            "the file changed, starting over"
        )

    def _transfer(
        self,
        transfer: Transfer,
        client: HttpClient,
        resp: http.client.HTTPResponse,
        start: int,
        probe_end: int | None,
    ) -> None:
        """Turn the probe's answer into a transfer: a 206 over several connections, a 200 over one."""
        found = Validators.of(resp)
        self.encoding = _content_encoding(resp)
        if self.encoding and self.session.options.unknown_sha256:
            # No hash can tell encoded bytes from the file here (bake add is learning the hash), and
            # bake fetch would verify the bytes as stored: pin nothing rather than the wrong bytes.
            raise DownloadError(
                f"{self.shown} sent the file with Content-Encoding: {self.encoding}, although bake asked "
                "for identity; bake add pins the bytes as the server stores them, which bake fetch then "
                "verifies: serve the file as stored, or add it from another mirror (not retried)",
                retryable=False,
            )
        if resp.status == 206:
            total = check_content_range(resp, self.source.url, start, probe_end, None)
            self._check_size(total)
            self._check_version(found, total, resumable=True)
            # A server may end the range early, at the file's end.
            claim = Claim(start, min(probe_end or total, total))
        else:
            total = self._whole_file(resp)
            self._check_version(found, total, resumable=False)
            claim = Claim(0, total)
        self.partial.state = PartialState(total, self.shown, found.etag, found.modified)
        transfer.validators = found
        self.hooks.begin(total)
        self.partial.ensure_room(self.asset.size)
        reader = self.reader(client, resp)
        if resp.status != 206:
            transfer.single(total, claim)
            transfer.run(claim, reader)
            return
        transfer.plan(total, claim, self.connections)
        transfer.run(
            claim,
            reader,
            connection=HttpPieces(self, transfer, client, resp),
            open_connection=lambda: HttpPieces(self, transfer, self.client(transfer), None),
            helpers=self.connections - 1,
        )

    def _check_version(self, found: Validators, total: int | None, *, resumable: bool) -> None:
        """Compare the answer with the version an earlier answer of this source showed.

        A replaced file is told to the job (its final error names it) even when no byte
        of the old one was kept. A 206 that would add to the old bytes raises Changed; a
        200 brings the whole file anyway, so the old bytes are dropped here.
        """
        state = self.partial.state
        with self.partial.lock:
            kept = bool(self.partial.written.spans)
        same_source = state.url == self.shown
        change = Validators(state.etag, state.modified).change_to(found) if same_source else None
        if resumable and kept:
            if state.size is not None and total != state.size:
                raise Changed(
                    f"{self.shown} now serves {total} bytes, the partial was for {state.size}; starting over"
                )
            if change:
                raise Changed(
                    f"{self.shown} changed during the download ({change}); starting over", validator=change
                )
            return
        if change:
            log.warning(
                "%s: %s changed during the download (%s); starting from zero",
                self.asset.name,
                self.shown,
                change,
            )
            self.hooks.changed(change)
        elif kept:
            log.info(
                "%s: %s answered the resume with the whole file; starting from zero",
                self.asset.name,
                self.shown,
            )
        if kept and not resumable:
            self.partial.discard()

    def _whole_file(self, resp: http.client.HTTPResponse) -> int | None:
        """A 200: the whole file over one stream, from zero. Returns its size when known."""
        total = resp.length  # None when chunked or close-delimited
        if total is not None:
            self._check_size(total)
            self.unvouched = self.asset.size is None  # a short Content-Length would look like the end
        else:
            total = self.asset.size  # then an early EOF reads as truncation, not as the end
            self.unsized = total is None
        return total

    def _check_size(self, total: int) -> None:
        """check_size, naming a Content-Encoding the server applied unasked: compressed bytes never fit.

        A file of unknown size must also fit under --max-size.
        """
        try:
            check_size(self.asset, self.source.url, total)
        except DownloadError as exc:
            if self.encoding:
                raise DownloadError(f"{exc}; {encoding_note(self.encoding)}", retryable=False) from None
            raise
        self.partial.check_claim(total, self.shown)

    def _watchdog(self, transfer: Transfer) -> threading.Timer | None:
        """Cut the transfer when the deadline passes: socket timeouts bound each recv, not a read.

        A server that trickles bytes just faster than the stall timeout keeps
        one buffered read (or one header line) going far past the deadline.
        """
        left = self.clock.remaining()
        if left is None:
            return None
        timer = threading.Timer(
            max(0.0, left), transfer.fail, args=(self.clock.deadline_error("transferring"),)
        )
        timer.daemon = True
        timer.start()
        return timer

    def reader(self, client: HttpClient, resp: http.client.HTTPResponse) -> Reader:
        def read(view: memoryview) -> int:
            client.set_timeout(self.clock.io_timeout())
            try:
                return resp.readinto(view)
            except TimeoutError:
                raise self.clock.stall_error("reading the body") from None
            except (OSError, http.client.HTTPException) as exc:
                raise DownloadError(f"connection broke: {describe_error(exc)}", retryable=True) from None

        return read


class HttpPieces:
    """One connection of a segmented transfer: asks for one claimed range after another."""

    def __init__(
        self,
        attempt: HttpAttempt,
        transfer: Transfer,
        client: HttpClient,
        response: http.client.HTTPResponse | None,
    ) -> None:
        self.attempt = attempt
        self.transfer = transfer
        self.client = client
        self.response = response  # the body being read, if any

    def fetch(self, claim: Claim) -> Reader:
        with self.transfer.lock:
            start, end = claim.pos, claim.end
        transfer = self.transfer
        try:
            resp, _ = self.client.request(
                self.attempt.source, transfer.url, {"Range": f"bytes={start}-{end - 1}"}
            )
        except DownloadError as exc:
            # The probe worked, so a refusal now is more likely an expired redirect than a missing file:
            # let the next attempt start over from the source URL.
            exc.retryable = exc.retryable or not isinstance(exc, DeadlineExceeded)
            raise
        self.response = resp
        try:
            check_content_range(resp, transfer.url, start, end, transfer.size)
        except DownloadError:
            self.client.close()
            raise
        change = transfer.validators.change_to(Validators.of(resp))
        if change:
            self.client.close()
            self.attempt.hooks.etag_split()
            raise Changed(
                f"{self.attempt.shown} changed during the download ({change}); starting over",
                validator=change,
            )
        return self.attempt.reader(self.client, resp)

    def end_piece(self) -> None:
        if self.response is not None and not self.response.isclosed():
            self.client.close()  # a stolen tail left bytes unread

    def close(self) -> None:
        self.client.close()

"""Stream an image's saved archive and report where given byte patterns occur.

ROCm images are tens of GB, so nothing here holds a layer, or even one file, in memory: the
archive arrives as the docker SDK's chunks, each layer is read as a tar stream inside that
stream, and every file is scanned in fixed-size chunks with an overlap, so a pattern split
across two chunks is still found. Names and link targets are checked too, and the image
config, with each history entry reported on its own.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO

CHUNK = 1 << 20
# Config, manifest and index blobs are small JSON documents; anything larger is scanned as bytes only.
JSON_LIMIT = 64 << 20


@dataclass(frozen=True)
class Finding:
    """Pattern ``pattern`` (0-based) occurs at ``where``: a layer and path, the config, a history entry."""

    pattern: int
    where: str


class ChunkReader(io.RawIOBase):
    """A sequential, readable file over an iterator of byte chunks.

    tarfile's stream mode wants a file object; the docker SDK gives a generator.
    """

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _rejoined(head: bytes, rest: IO[bytes]) -> IO[bytes]:
    """Return a stream that yields ``head`` and then the remainder of ``rest``."""

    def chunks() -> Iterator[bytes]:
        yield head
        while block := rest.read(CHUNK):
            yield block

    return io.BufferedReader(ChunkReader(chunks()), CHUNK)


class Scanner:
    """Finds any of ``patterns`` in streams, names and documents."""

    def __init__(self, patterns: list[bytes]) -> None:
        if any(not p for p in patterns):
            raise ValueError("an empty secret pattern would match everything")
        self.patterns = patterns
        self.keep = max((len(p) for p in patterns), default=1) - 1
        self.findings: list[Finding] = []

    def _hit(self, data: bytes, where: str, seen: set[int]) -> None:
        for index, pattern in enumerate(self.patterns):
            if index not in seen and pattern in data:
                seen.add(index)
                self.findings.append(Finding(index, where))

    def scan_bytes(self, data: bytes, where: str) -> None:
        self._hit(data, where, set())

    def scan_stream(self, stream: IO[bytes], where: str) -> None:
        seen: set[int] = set()
        tail = b""
        while block := stream.read(CHUNK):
            self._hit(tail + block, where, seen)
            tail = (tail + block)[-self.keep :] if self.keep else b""

    def scan_layer(self, stream: IO[bytes], layer: str) -> None:
        """Scan every member of one layer tar: its name, its link target, its contents."""
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                self.scan_bytes(
                    member.name.encode("utf-8", "surrogateescape"), f"{layer}: name {member.name}"
                )
                if member.linkname:
                    self.scan_bytes(
                        member.linkname.encode("utf-8", "surrogateescape"),
                        f"{layer}: link target of {member.name}",
                    )
                if member.isfile():
                    self.scan_stream(tar.extractfile(member), f"{layer}: {member.name}")

    def scan_document(self, data: bytes, where: str) -> None:
        """Scan a JSON blob; an image config's history entries are each reported on their own."""
        self.scan_bytes(data, where)
        try:
            doc = json.loads(data)
        except ValueError:
            return
        if isinstance(doc, dict) and isinstance(doc.get("history"), list):
            for number, entry in enumerate(doc["history"]):
                self.scan_bytes(json.dumps(entry).encode(), f"history entry {number}")

    def redact(self, text: str) -> str:
        """Return ``text`` with every pattern replaced by its number, for messages that must not leak it."""
        for index, pattern in enumerate(self.patterns):
            text = text.replace(pattern.decode("utf-8", "replace"), f"<pattern {index + 1}>")
        return text


def _label(name: str) -> str:
    """Name a saved-archive member the way `docker inspect` names layers: ``layer sha256:…``."""
    parts = name.split("/")
    if parts[:2] == ["blobs", "sha256"] and len(parts) == 3:
        return f"layer sha256:{parts[2]}"
    return f"layer {name}"


def scan_archive(chunks: Iterable[bytes], patterns: list[bytes]) -> list[Finding]:
    """Scan a ``docker save`` stream (legacy or OCI layout) for ``patterns``; return every finding.

    Each member is classified by its first bytes: a tar is a layer (gzip is unwrapped first),
    anything else is a document (config, manifest, index).
    """
    scanner = Scanner(patterns)
    with tarfile.open(fileobj=io.BufferedReader(ChunkReader(chunks), CHUNK), mode="r|") as outer:
        for member in outer:
            scanner.scan_bytes(member.name.encode(), f"archive member name {member.name}")
            if not member.isfile():
                continue
            stream = outer.extractfile(member)
            head = stream.read(512)
            if head[:2] == b"\x1f\x8b":
                stream = gzip.GzipFile(fileobj=_rejoined(head, stream))
                head = stream.read(512)
            if len(head) == 512 and head[257:262] == b"ustar":
                scanner.scan_layer(_rejoined(head, stream), _label(member.name))
            elif member.size <= JSON_LIMIT:
                scanner.scan_document(head + stream.read(), f"image document {member.name}")
            else:
                scanner.scan_stream(_rejoined(head, stream), member.name)
    return scanner.findings

"""bake.testing.layers: the streaming secret scan of a saved image: chunks, names, links, history."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from bake.testing.layers import CHUNK, scan_archive


def _tar(members: dict[str, bytes | str], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of regular files (bytes) and links (str targets)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, value in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
    return buffer.getvalue()


def _chunks(data: bytes, size: int = 4096):
    return (data[i : i + size] for i in range(0, len(data), size))


@pytest.fixture
def archive() -> bytes:
    """A saved image in the OCI layout: one layer, one config with history."""
    secret = b"hf_s3cr3t"
    # The secret straddles the scanner's chunk boundary inside a large file.
    big = b"a" * (CHUNK - 4) + secret + b"b" * 100
    layer = _tar(
        {"opt/clean": b"x", "opt/big.bin": big, f"etc/{secret.decode()}-name": b"", "etc/l": "/tmp/hf_s3cr3t"}
    )
    config = json.dumps(
        {"history": [{"created_by": "RUN true"}, {"created_by": "RUN echo hf_s3cr3t"}]}
    ).encode()
    return _tar({"blobs/sha256/aaaa": layer, "blobs/sha256/cccc": config, "index.json": b"{}"})


def test_scan_archive_names_layer_path_link_and_history(archive: bytes) -> None:
    found = {f.where for f in scan_archive(_chunks(archive), [b"hf_s3cr3t"])}
    assert {
        "layer sha256:aaaa: opt/big.bin",
        "layer sha256:aaaa: name etc/hf_s3cr3t-name",
        "layer sha256:aaaa: link target of etc/l",
        "history entry 1",
        "image document blobs/sha256/cccc",
    } == found


def test_scan_archive_reports_nothing_for_an_absent_pattern(archive: bytes) -> None:
    assert scan_archive(_chunks(archive), [b"not-there"]) == []


def test_scan_archive_reads_gzip_layers() -> None:
    import gzip

    saved = _tar({"blobs/sha256/gz": gzip.compress(_tar({"root/token": b"tok=hf_zz"}))})
    assert [f.where for f in scan_archive(_chunks(saved), [b"hf_zz"])] == ["layer sha256:gz: root/token"]

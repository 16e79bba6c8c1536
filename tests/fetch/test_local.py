"""file:// sources, read into the partial under the asset's clock."""

from __future__ import annotations

from pathlib import Path

from tests.fetch.conftest import KIB, blob, fetch_one, make_asset


def test_file_url_source(tmp_path: Path) -> None:
    data = blob(100 * KIB)
    (tmp_path / "src.bin").write_bytes(data)
    record = fetch_one(make_asset(data, (tmp_path / "src.bin").as_uri()), tmp_path)
    assert record.bytes == len(data)
    assert (tmp_path / "dest/data/blob.bin").read_bytes() == data

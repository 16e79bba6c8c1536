"""Mirror specs (bake/fetch/sources.py) never show the passwords they carry (redaction: test_urls.py)."""

from __future__ import annotations

import pytest

from bake.errors import UsageError
from bake.fetch.sources import parse_mirrors


@pytest.mark.parametrize(
    "spec",
    [
        "https://user:secret@mirror.internal/",  # no PREFIX=
        "https://a/=ftp://user:secret@mirror.internal/",  # a scheme bake does not fetch
        "https://a/=https://user:secret@[bad/",  # not a URL
    ],
)
def test_a_bad_mirror_spec_never_shows_its_password(spec: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_mirrors([spec])
    assert "secret" not in str(info.value) and "***" in str(info.value)

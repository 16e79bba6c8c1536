"""What a fetch is asked and reports: the options' defaults, a frozen record, the run's failure message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bake.byte_sizes import GIB
from bake.errors import DownloadError
from bake.fetch.options import (
    DEFAULT_CONNECTIONS,
    DEFAULT_MAX_SIZE,
    MIN_FREE_RULE,
    FetchFailed,
    FetchOptions,
    FetchRecord,
)


def record(name: str) -> FetchRecord:
    return FetchRecord(name, f"d/{name}", "https://m/f", 10, 10, 0.5, 1, False, "0" * 64)


def test_options_default_to_a_polite_bounded_fetch(tmp_path: Path) -> None:
    options = FetchOptions(cache_dir=tmp_path)
    assert (options.connections, options.attempts, options.timeout, options.jobs) == (
        DEFAULT_CONNECTIONS,
        5,
        30.0,
        4,
    )
    assert (options.deadline, options.min_free, options.max_size) == (None, None, DEFAULT_MAX_SIZE)
    assert (options.mirrors, options.no_origin, options.allow_http, options.unknown_sha256) == (
        (),
        False,
        False,
        False,
    )
    assert DEFAULT_CONNECTIONS == 4 and DEFAULT_MAX_SIZE == 16 * GIB


def test_options_and_records_are_frozen(tmp_path: Path) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FetchOptions(cache_dir=tmp_path).attempts = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record("a").bytes = 0  # type: ignore[misc]


def test_the_min_free_rule_is_spelt_out() -> None:
    assert MIN_FREE_RULE == "the smaller of 1 GiB and 5% of the filesystem"


@pytest.mark.parametrize(
    ("failed", "landed", "first_line"),
    [
        (["a"], [], "1 of 1 asset(s) could not be fetched:"),
        (["a", "b"], ["c"], "2 of 3 asset(s) could not be fetched:"),
    ],
)
def test_fetch_failed_counts_and_names_each_failure(
    failed: list[str], landed: list[str], first_line: str
) -> None:
    failures = {name: DownloadError(f"asset {name!r}: HTTP 404") for name in failed}
    records = [record(name) for name in landed]
    error = FetchFailed(failures, records)
    assert str(error).splitlines() == [first_line, *(f"asset {name!r}: HTTP 404" for name in failed)]
    assert (error.failures, error.records) == (failures, records)
    assert error.exit_code == 3

"""A new user's first hour (issue 28, and issue 29's findings 10 and 11 for `bake add`): one test per finding.

Each runs the real CLI the way a newcomer would, on file:// URLs and loopback servers, and asserts
what the user must get: a manifest started by `bake add`, one error line per failure with advice
that is right, no traceback, and the contract's exit codes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bake import manifest
from tests.mirror import Mirror

from . import KIB, bake, blob, error_text, manifest_text, sha256

DATA = blob(64 * KIB, "first-hour")
pytestmark = pytest.mark.timeout(120)


def xfail(finding: str) -> pytest.MarkDecorator:
    """A finding not fixed yet: the test must fail until the fix removes this marker."""
    return pytest.mark.xfail(strict=True, reason=f"first hour: {finding}")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "model.bin"
    path.parent.mkdir()
    path.write_bytes(DATA)
    return path


def add(manifest_path: Path, url: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return bake("add", url, "--path", "data/model.bin", "--manifest", manifest_path, "--cache-dir", cache,
                *args)  # fmt: skip


def assert_one_clean_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The exit code, no traceback, and exactly one ``bake: error:`` line; returns the error text."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("bake: error:") == 1, proc.stderr
    return error_text(proc.stderr)


# -- finding 1: `bake add` starts a manifest ------------------------------------------------------


@pytest.mark.parametrize("start", ["missing", "empty", "comments only"])
def test_add_starts_a_manifest(tmp_path: Path, source: Path, start: str) -> None:
    target = tmp_path / "assets.toml"
    if start == "empty":
        target.write_text("")
    elif start == "comments only":
        target.write_text("# the assets of our CI\n")
    proc = add(target, source.as_uri(), tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    (asset,) = manifest.load_manifest(target)
    assert (asset.path, asset.sha256, asset.size) == ("data/model.bin", sha256(DATA), len(DATA))
    if start == "comments only":
        assert target.read_text().startswith("# the assets of our CI\n")


# -- finding 2: no traceback when the manifest's directory cannot be written -------------------------


def test_add_into_a_read_only_directory_is_one_clean_error(tmpfs, tmp_path: Path, source: Path) -> None:
    where = tmpfs("ro", 1024 * KIB)
    target = where / "assets.toml"
    target.write_text(manifest_text([{"name": "a", "path": "data/a", "sha256": "0" * 64,
                                      "urls": ["file:///nowhere"]}]))  # fmt: skip
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    proc = add(target, source.as_uri(), tmp_path / "cache")
    errors = assert_one_clean_error(proc, 2)
    assert str(target) in errors and "read-only" in errors.lower(), errors


# -- finding 4: advice that is right -------------------------------------------------------------------


def fetch_one(tmp_path: Path, url: str, *, size: int | None = len(DATA)) -> subprocess.CompletedProcess[str]:
    entry = {"name": "model", "path": "data/model.bin", "sha256": sha256(DATA), "urls": [url]}
    if size is not None:
        entry["size"] = size
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([entry]))
    return bake("fetch", "--manifest", target, "--dest", tmp_path / "dest", "--cache-dir", tmp_path / "c",
                "--attempts", "3")  # fmt: skip


@pytest.mark.parametrize("what", ["a directory", "an unknown host"])
def test_a_permanent_error_is_not_retried_nor_blamed_on_the_network(tmp_path: Path, what: str) -> None:
    url = (tmp_path / "a-directory").as_uri() if what == "a directory" else "https://no-such-host.invalid/m"
    (tmp_path / "a-directory").mkdir()
    proc = fetch_one(tmp_path, url)
    assert_one_clean_error(proc, 3)
    assert "retrying" not in proc.stderr, proc.stderr
    assert "--attempts" not in proc.stderr and "flaky" not in proc.stderr, proc.stderr


def test_a_resolver_that_cannot_answer_now_is_transient() -> None:
    import socket

    from bake.fetch.transport import resolver_failure

    assert resolver_failure(socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), "h").retryable
    assert not resolver_failure(
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "h"
    ).retryable


def test_a_size_mismatch_says_fix_the_manifest(tmp_path: Path, source: Path) -> None:
    proc = fetch_one(tmp_path, source.as_uri(), size=len(DATA) + 1)
    errors = assert_one_clean_error(proc, 3)
    assert "size" in errors and "in the manifest" in errors, errors
    assert "fix the source" not in errors, errors


def test_errors_from_add_point_at_no_manifest_entry(tmp_path: Path, clean_net_env: None) -> None:
    with Mirror({}) as served:
        proc = add(tmp_path / "assets.toml", served.url("/missing.bin"), tmp_path / "cache")
    errors = assert_one_clean_error(proc, 3)
    assert "in the manifest" not in errors and "this sha256" not in errors, errors
    assert "URL" in errors, errors


# -- issue 29 finding 10: a FIFO as the manifest ----------------------------------------------------


def test_add_refuses_a_fifo_as_the_manifest_and_never_blocks(tmp_path: Path, source: Path) -> None:
    fifo = tmp_path / "assets.toml"
    os.mkfifo(fifo)
    proc = bake("add", source.as_uri(), "--path", "data/model.bin", "--manifest", fifo, "--cache-dir",
                tmp_path / "cache", timeout=20)  # fmt: skip
    errors = assert_one_clean_error(proc, 2)
    assert "regular file" in errors and str(fifo) in errors, errors


# -- issue 29 finding 11: credentials in the query string ----------------------------------------------


@pytest.mark.parametrize("param", ["token", "access_token", "X-Amz-Signature", "sig"])
def test_add_writes_no_query_credentials(tmp_path: Path, clean_net_env: None, param: str) -> None:
    with Mirror({"/m.bin": DATA}) as served:
        url = served.url("/m.bin") + f"?{param}=s3cret-T0ken&rev=2"
        target = tmp_path / "assets.toml"
        proc = add(target, url, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "s3cret" not in target.read_text()
    assert "s3cret" not in proc.stdout + proc.stderr
    assert manifest.load_manifest(target)[0].urls == (served.url("/m.bin") + "?rev=2",)
    assert "--mirror" in proc.stderr and "bake_mirrors" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/f?token=abc&rev=2", "https://h/f?token=***&rev=2"),
        ("https://u:pw@h/f?X-Amz-Signature=abc#x", "https://u:***@h/f?X-Amz-Signature=***#x"),
        ("https://h/f?sig=abc&sv=2020", "https://h/f?sig=***&sv=2020"),
        ("https://h/f?revision=main", "https://h/f?revision=main"),
    ],
)
def test_messages_never_show_a_query_credential(url: str, shown: str) -> None:
    assert manifest.redact_url(url) == shown

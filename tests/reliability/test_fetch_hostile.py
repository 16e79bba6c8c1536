"""A newcomer's mistakes against ``bake fetch``: advice that is right, one statement of a failure,
JSON complete on failure, defaults that fit a small disk and a stored Hub token (issue 28); a fetch
that fails leaves ``--dest`` as it found it: no new empty directory, nor ``--dest`` itself (assets that
do verify are still installed when others fail, as the contract says).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.mirror import Mirror, http_error

from . import KIB, REPO, asset_entry, bake, blob, cli_env, manifest_text, sha256
from .newcomer import DATA, assert_one_clean_error, failing_fetch, fetch_one, write_manifest

pytestmark = pytest.mark.timeout(120)


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


@pytest.mark.parametrize("where", ["dest", "parent"])
def test_a_read_only_dest_and_a_read_only_parent_exit_alike(
    tmpfs, tmp_path: Path, source: Path, where: str
) -> None:
    mount = tmpfs("ro", 1024 * KIB)
    dest = mount if where == "dest" else mount / "dest"
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    proc = bake("fetch", "--manifest", write_manifest(tmp_path, source.as_uri()), "--dest", dest,
                "--cache-dir", tmp_path / "c")  # fmt: skip
    errors = assert_one_clean_error(proc, 2)
    assert f"--dest {dest}" in errors, errors


def test_a_failure_is_stated_once(tmp_path: Path, source: Path) -> None:
    proc = failing_fetch(tmp_path, source)
    assert_one_clean_error(proc, 3)
    assert proc.stderr.count(".gone") == 1, proc.stderr
    lines = proc.stderr.splitlines()
    tried = [i for i, line in enumerate(lines) if line.endswith("source(s):")]
    assert tried and all(lines[i + 1].startswith("  - ") for i in tried), proc.stderr  # never a dangling list


@pytest.mark.parametrize("to", ["file", "stdout"])
def test_json_is_complete_on_failure(tmp_path: Path, source: Path, to: str) -> None:
    import json

    report = tmp_path / "report.json"
    proc = failing_fetch(tmp_path, source, "--json", str(report) if to == "file" else "-")
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(report.read_text() if to == "file" else proc.stdout)
    by_name = {a["name"]: a for a in doc["assets"]}
    assert by_name["good"]["ok"] is True and by_name["bad"]["ok"] is False, doc
    (error,) = doc["errors"]
    assert error["asset"] == "bad" and error["url"].endswith(".gone"), doc
    assert not (REPO / "-").exists()


def test_a_small_file_without_a_size_fetches_on_a_small_disk(tmpfs, tmp_path: Path, source: Path) -> None:
    small = tmpfs("small", 8 * 1024 * KIB)
    target = tmp_path / "assets.toml"
    target.write_text(
        manifest_text([{"name": "m", "path": "d/m", "sha256": sha256(DATA), "urls": [source.as_uri()]}])
    )
    proc = bake("fetch", "--manifest", target, "--dest", small / "dest", "--cache-dir", small / "cache")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("where", ["HF_TOKEN_PATH", "HF_HOME/token"])
def test_the_stored_hub_token_is_honoured(tmp_path: Path, where: str) -> None:
    token = tmp_path / "token"
    token.write_text("hf_stored\n")
    env = {"HF_TOKEN_PATH": str(token)} if where == "HF_TOKEN_PATH" else {"HF_HOME": str(tmp_path)}
    code = "from bake.fetch.sources import hf_token; print(hf_token())"
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env({"HF_TOKEN": "", **env}),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.stdout.strip() == "hf_stored", proc.stderr


# -- a failed fetch leaves --dest as it was ----------------------------------------------------------

GONE = blob(64 * KIB, "failed-fetch-gone")


def tree(root: Path) -> list[str] | None:
    """Every entry under ``root``, directories included; None when ``root`` does not exist."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else None


@pytest.mark.parametrize("dest_exists", [True, False], ids=["dest-exists", "no-dest-yet"])
def test_a_failed_fetch_leaves_dest_as_it_was(tmp_path: Path, clean_net_env: None, dest_exists: bool) -> None:
    dest = tmp_path / "dest"
    if dest_exists:
        (dest / "kept").mkdir(parents=True)
        (dest / "kept" / "file").write_text("mine")
    before = tree(dest)
    with Mirror({"/gone.bin": GONE}) as m:
        m.script("/gone.bin", *[http_error(404)] * 3)
        manifest = tmp_path / "assets.toml"
        manifest.write_text(
            manifest_text([asset_entry("gone", "deep/er/gone.bin", GONE, m.url("/gone.bin"))])
        )
        proc = bake("fetch", "--manifest", manifest, "--dest", dest, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 3, proc.stderr
    assert tree(dest) == before

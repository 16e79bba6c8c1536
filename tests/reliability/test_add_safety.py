"""`bake add` run the way people run it: twice at once, through a symlink, with credentials in the URL,
against a server that compresses unasked. The manifest keeps every entry, names no secret, and pins
exactly the bytes `bake fetch` will verify.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bake import manifest
from tests.mirror import Mirror, gzip_body

from . import KIB, bake, bake_command, blob, cli_env, error_text, manifest_text, sha256

DATA = {name: blob(600 * KIB + i, f"add-{name}") for i, name in enumerate("abcd")}
FIRST = {"name": "first", "path": "data/first.bin", "sha256": sha256(b"x"), "urls": ["file:///nowhere"]}


@pytest.fixture
def served(clean_net_env: None) -> Mirror:
    # Slow enough that two adds started together are both still downloading when either writes.
    with Mirror({f"/{n}.bin": d for n, d in DATA.items()}, rate=1024 * 1024) as m:
        yield m


def add_command(manifest_path: Path, cache: Path, url: str, path: str) -> list[str]:
    return bake_command(
        "add", url, "--path", path, "--manifest", manifest_path, "--cache-dir", cache, "--timeout", "10"
    )


@pytest.mark.parametrize("round_", range(3))
def test_two_adds_at_once_keep_both_entries(served: Mirror, tmp_path: Path, round_: int) -> None:
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([FIRST]))
    pair = ["a", "b"] if round_ % 2 else ["c", "d"]
    procs = [
        subprocess.Popen(
            add_command(target, tmp_path / f"cache-{n}", served.url(f"/{n}.bin"), f"data/{n}.bin"),
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in pair
    ]
    results = [(*p.communicate(timeout=120), p.returncode) for p in procs]
    assert all(code == 0 for _, _, code in results), results
    entries = {a.path: a.sha256 for a in manifest.load_manifest(target)}
    assert entries == {
        "data/first.bin": FIRST["sha256"],
        **{f"data/{n}.bin": sha256(DATA[n]) for n in pair},
    }


def test_add_writes_no_credentials_and_says_where_they_belong(tmp_path: Path, clean_net_env: None) -> None:
    with Mirror({"/a.bin": DATA["a"]}, basic_auth=("builder", "s3cret-Pa55")) as locked:
        url = locked.url("/a.bin").replace("http://", "http://builder:s3cret-Pa55@")
        target = tmp_path / "assets.toml"
        target.write_text(manifest_text([FIRST]))
        proc = bake("add", url, "--path", "data/a.bin", "--manifest", target, "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert "s3cret" not in text and "builder" not in text
    assert manifest.load_manifest(target)[-1].urls == (locked.url("/a.bin"),)
    assert "s3cret" not in proc.stderr + proc.stdout
    assert "--mirror" in proc.stderr and "bake_mirrors" in proc.stderr, proc.stderr


def test_add_refuses_a_content_encoding_and_pins_nothing(served: Mirror, tmp_path: Path) -> None:
    served.script("/a.bin", gzip_body())
    target = tmp_path / "assets.toml"
    target.write_text(manifest_text([FIRST]))
    before = target.read_text()
    proc = bake("add", served.url("/a.bin"), "--path", "data/a.bin", "--manifest", target,
                "--cache-dir", tmp_path / "c")  # fmt: skip
    errors = error_text(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert "Content-Encoding: gzip" in errors and served.url("/a.bin") in errors, errors
    assert target.read_text() == before


@pytest.mark.parametrize("how", ["add", "size-only"])
def test_add_through_a_symlinked_manifest_edits_its_target(served: Mirror, tmp_path: Path, how: str) -> None:
    real = tmp_path / "real" / "assets.toml"
    real.parent.mkdir()
    sizeless = {
        "name": "a",
        "path": "data/a.bin",
        "sha256": sha256(DATA["a"]),
        "urls": [served.url("/a.bin")],
    }
    real.write_text(manifest_text([FIRST, sizeless]))
    real.chmod(0o640)
    link = tmp_path / "assets-link.toml"
    link.symlink_to(real)
    args = ["--size-only", "a"] if how == "size-only" else [served.url("/b.bin"), "--path", "data/b.bin"]
    proc = bake("add", *args, "--manifest", link, "--cache-dir", tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and link.resolve() == real
    assert real.stat().st_mode & 0o777 == 0o640
    assets = {a.name: a for a in manifest.load_manifest(real)}
    if how == "size-only":
        assert assets["a"].size == len(DATA["a"])
    else:
        assert assets["b"].sha256 == sha256(DATA["b"])

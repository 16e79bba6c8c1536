"""The destination index: SHA256SUMS, bake.lock.json, verification and seal."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from bake import lockfile
from bake.errors import UsageError, VerifyError
from bake.manifest import Asset, manifest_digest

VOCAB_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
VOCAB_NAME = hashlib.sha1(VOCAB_URL.encode()).hexdigest()


def make_dest(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, list[Asset]]:
    dest = tmp_path / "dest"
    assets = []
    for i, (rel, data) in enumerate(files.items()):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        url = VOCAB_URL if rel.startswith("tiktoken/") else f"https://example.org/{i}"
        assets.append(Asset(f"a{i}", rel, hashlib.sha256(data).hexdigest(), (url,)))
    return dest, assets


FILES = {"s3tokenizer/m.onnx": b"model bytes", f"tiktoken/{VOCAB_NAME}": b"vocab bytes"}


def test_index_files_are_checkable_and_deterministic(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    lockfile.write_index(dest, assets)
    first = {n: (dest / n).read_bytes() for n in ("SHA256SUMS", "bake.lock.json")}
    lockfile.write_index(dest, list(reversed(assets)))
    assert {n: (dest / n).read_bytes() for n in first} == first
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dest, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    lock = json.loads(first["bake.lock.json"])
    assert lock["manifest_digest"] == manifest_digest(assets)
    assert [(e["path"], e["size"]) for e in lock["assets"]] == sorted((p, len(d)) for p, d in FILES.items())
    assert not [p for p in dest.iterdir() if p.name.endswith(".bake-tmp")]


def test_read_lock_round_trips(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    lockfile.write_index(dest, assets)
    assert {(f.path, f.size, f.sha256) for f in lockfile.read_lock(dest)} == {
        (a.path, len(FILES[a.path]), a.sha256) for a in assets
    }


def test_read_lock_missing_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the lock"):
        lockfile.read_lock(tmp_path)


def test_verify_passes_on_good_files(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    lockfile.verify_dest(dest, lockfile.expected_files(assets))


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        pytest.param(lambda p: p.unlink(), "found missing", id="missing"),
        pytest.param(lambda p: p.write_bytes(b"model bytez"), "expected sha256", id="tampered"),
        pytest.param(lambda p: (p.unlink(), p.mkdir()), "not a regular file", id="directory"),
    ],
)
def test_verify_names_each_problem(tmp_path: Path, damage, needle: str) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    damage(dest / "s3tokenizer/m.onnx")
    with pytest.raises(VerifyError) as err:
        lockfile.verify_dest(dest, lockfile.expected_files(assets))
    assert "s3tokenizer/m.onnx" in str(err.value)
    assert needle in str(err.value)
    assert err.value.exit_code == 3


def test_verify_checks_size_before_hashing(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    sized = [lockfile.LockedFile(a.path, 999, a.sha256) for a in assets]
    with pytest.raises(VerifyError, match="expected 999 bytes"):
        lockfile.verify_dest(dest, sized)


def test_encoding_links_use_the_url_file_name() -> None:
    assets = [
        Asset("v", f"tiktoken/{VOCAB_NAME}", "0" * 64, (VOCAB_URL,)),
        Asset("m", "x/m", "0" * 64, ("file:///m",)),
    ]
    assert lockfile.encoding_links(assets) == {"tiktoken/o200k_base.tiktoken": VOCAB_NAME}


def test_seal_links_and_makes_read_only(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    lockfile.write_index(dest, assets)
    lockfile.seal(dest, assets)
    lockfile.seal(dest, assets)  # idempotent
    link = dest / "tiktoken/o200k_base.tiktoken"
    assert os.readlink(link) == VOCAB_NAME
    assert link.read_bytes() == FILES[f"tiktoken/{VOCAB_NAME}"]
    modes = {
        str(p.relative_to(dest)): stat.S_IMODE(p.lstat().st_mode)
        for p in [dest, *dest.rglob("*")]
        if not p.is_symlink()
    }
    assert modes == {
        ".": 0o555,
        "s3tokenizer": 0o555,
        "tiktoken": 0o555,
        "SHA256SUMS": 0o444,
        "bake.lock.json": 0o444,
        "s3tokenizer/m.onnx": 0o444,
        f"tiktoken/{VOCAB_NAME}": 0o444,
    }
    for p in [dest, *dest.rglob("*")]:  # let pytest clean up
        if not p.is_symlink():
            p.chmod(0o755)


def test_seal_refuses_unfetched_dest(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="run `bake fetch`"):
        lockfile.seal(tmp_path, [])


def test_seal_refuses_a_foreign_file_at_the_link_path(tmp_path: Path) -> None:
    dest, assets = make_dest(tmp_path, FILES)
    lockfile.write_index(dest, assets)
    (dest / "tiktoken/o200k_base.tiktoken").write_bytes(b"someone else's")
    with pytest.raises(UsageError, match="expected a link"):
        lockfile.seal(dest, assets)

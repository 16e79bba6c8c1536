"""Signing and its checks (bake.signing, bake.cosign, bake.attestation) with the real cosign and registry.

Each test pushes small unit images, an index and a whole image to the toolchain's registry
(127.0.0.1:5000, distribution 2.8: no referrers API, so cosign's tag scheme) in a repository of its
own, and signs with a key pair it makes. Tests sign with ``--tlog-upload=false`` and verify with
``--insecure-ignore-tlog=true`` (``tlog=False``): these machines reach no transparency log.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bake import __version__, signing
from bake.asset import Asset
from bake.attestation import PREDICATE_TYPE, FileRecord, differences, predicate, read_statement, records_of
from bake.cosign import Cosign, CosignError, Unverified, check_key
from bake.errors import UsageError
from bake.hub.entry import HubBlob, HubEntry, HubFile
from bake.index import lock_document
from bake.manifest import manifest_digest
from bake.publish import Block
from bake.signing import pin_verifier, sign, sign_block, subjects_of, verify, verify_block, verify_lock
from tests.registries import OCI_MANIFEST, REGISTRY, remove_images_named
from tests.runners import REPO, bake
from tests.signed import key_pair, push_image, push_selection, repush, tar_of

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

UNITS = {
    "asset.vocab": {"data/vocab.bin": b"vocab bytes\n" * 100},
    "layer.model": {"model/a.bin": b"\x00\x01" * 4096, "model/b.bin": b"weights" * 500},
    "asset.checkpoint": {"data/checkpoint.onnx": b"onnx" * 1000},
}


@pytest.fixture
def repository() -> str:
    return f"{REGISTRY}/sign-test/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A key pair made for the test, with an empty password, which COSIGN_PASSWORD gives."""
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    return key_pair(tmp_path)


@pytest.fixture
def published(repository: str) -> tuple[Block, list[Asset]]:
    return push_selection(repository, UNITS)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def signer(key: str) -> Cosign:
    """cosign signing with a private key file, or verifying with a public one; no transparency log."""
    return Cosign.signer(key, tlog=False) if key.endswith(".key") else Cosign(key, tlog=False)


def digest_of(assets: list[Asset]) -> str:
    return manifest_digest(assets)


def signed(published: tuple[Block, list[Asset]], key: str) -> list:
    block, assets = published
    subjects = subjects_of(block, assets, digest_of(assets))
    sign(subjects, signer(key))
    return subjects


def attestation_layers(subject) -> int:
    """How many attestations cosign's tag scheme holds for the subject (``sha256-<hex>.att``)."""
    host, _, name = subject.repository.partition("/")
    tag = subject.digest.replace(":", "-") + ".att"
    request = urllib.request.Request(
        f"http://{host}/v2/{name}/manifests/{tag}", headers={"Accept": OCI_MANIFEST}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return len(json.load(answer)["layers"])


def test_signed_selection_verifies_and_signing_again_adds_nothing(published, keys) -> None:
    key, pub = keys
    subjects = signed(published, key)
    attested = verify(subjects, signer(pub))
    block, assets = published
    # Each unit and the whole carry bake's attestation; the index a signature only.
    assert [a is not None for a in attested] == [True, True, True, False, True]
    assert attested[-1].units == {u.name: p.digest for u, p in block.units}
    assert attested[1].files == {
        "model/a.bin": (8192, assets[1].sha256),
        "model/b.bin": (3500, assets[2].sha256),
    }
    before = [attestation_layers(s) for s in subjects if s.predicate is not None]
    sign(subjects, signer(key))
    assert [attestation_layers(s) for s in subjects if s.predicate is not None] == before == [1, 1, 1, 1]


def test_the_attestation_lists_files_sources_manifest_digest_and_version(published, keys) -> None:
    key, pub = keys
    subjects = signed(published, key)
    statements = signer(pub).attestations(subjects[1].image, PREDICATE_TYPE)
    assert len(statements) == 1
    statement = statements[0]
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"][0]["digest"] == {"sha256": subjects[1].digest.removeprefix("sha256:")}
    _, assets = published
    assert statement["predicate"] == {
        "bake_version": __version__,
        "manifest_digest": digest_of(assets),
        "unit": "layer.model",
        "files": [
            {"path": a.path, "size": a.size, "sha256": a.sha256, "urls": [f"https://assets.invalid/{a.path}"]}
            for a in assets[1:3]
        ],
    }


def test_a_signature_by_another_key_fails_naming_each_image(published, keys, tmp_path: Path) -> None:
    other, _ = key_pair(tmp_path, "other")
    subjects = signed(published, other)
    with pytest.raises(Unverified) as caught:
        verify(subjects, signer(keys[1]))
    message = str(caught.value)
    assert caught.value.exit_code == 5
    assert "5 of 5 image(s) failed verification" in message
    for name in UNITS:
        assert f"unit {name} {subjects[0].repository}@" in message
    assert "no signature on it verifies with" in message


def test_an_unsigned_unit_fails_naming_it(published, keys) -> None:
    key, pub = keys
    block, assets = published
    subjects = subjects_of(block, assets, digest_of(assets))
    sign([s for s in subjects if s.what != "unit asset.checkpoint"], signer(key))
    with pytest.raises(Unverified) as caught:
        verify(subjects, signer(pub))
    assert str(caught.value).splitlines()[1:] == [
        f"  unit asset.checkpoint {subjects[2].image}: it has no signature"
    ]


def test_an_attestation_that_omits_a_file_fails_naming_the_file(published, keys) -> None:
    key, pub = keys
    block, assets = published
    subjects = subjects_of(block, assets, digest_of(assets))
    short = predicate(records_of(assets[1:2]), digest_of(assets), unit="layer.model")
    subjects[1] = replace(subjects[1], predicate=short)
    sign(subjects, signer(key))
    with pytest.raises(Unverified) as caught:
        verify(subjects, signer(pub))
    assert str(caught.value).splitlines()[1:] == [
        f"  unit layer.model {subjects[1].image}: its attestation differs from what is expected: "
        "omits model/b.bin"
    ]


def test_a_unit_pushed_again_with_one_byte_changed_is_unsigned(published, keys) -> None:
    key, pub = keys
    subjects = signed(published, key)
    block, assets = published
    unit, was = block.units[0]
    changed = bytearray(UNITS[unit.name]["data/vocab.bin"])
    changed[7] ^= 1
    now = repush(was, {"data/vocab.bin": bytes(changed)})
    assert now.digest != was.digest
    moved = Block(((unit, now), *block.units[1:]), block.index, block.whole)
    with pytest.raises(Unverified) as caught:
        verify(subjects_of(moved, assets, digest_of(assets)), signer(pub))
    unit_line, whole_line = str(caught.value).splitlines()[1:]
    assert unit_line == f"  unit asset.vocab {subjects[0].repository}@{now.digest}: it has no signature"
    # The whole image's attestation still names the unit image that was signed.
    assert whole_line.startswith(f"  image {subjects[-1].image}: its attestation differs")
    signed_units = ", ".join(sorted(p.digest for _, p in block.units))
    assert f"it names unit images {signed_units}, expected" in whole_line


def test_an_image_lock_verifies_through_the_whole_images_attestation(published, keys, repository) -> None:
    key, pub = keys
    signed(published, key)
    _, assets = published
    lock = lock_document(assets, {a.path: a.size for a in assets})
    assert verify_lock(lock, repository, signer(pub)) == 3
    (vocab,) = (entry for entry in lock["assets"] if entry["path"] == "data/vocab.bin")
    vocab["sha256"] = "0" * 64
    with pytest.raises(Unverified) as caught:
        verify_lock(lock, repository, signer(pub))
    assert f"image {repository}@" in str(caught.value)
    assert f"data/vocab.bin: sha256 {assets[0].sha256}, expected {'0' * 64}" in str(caught.value)


def test_an_image_lock_of_an_unpublished_selection_fails(keys, repository) -> None:
    lock = lock_document([], {})
    with pytest.raises(Unverified, match="not in the registry, so nothing proves who published"):
        verify_lock(lock, repository, signer(keys[1]))


def test_a_wrong_password_is_a_named_cosign_failure(keys, tmp_path: Path) -> None:
    key, _ = key_pair(tmp_path, "locked", password="s3cret")
    with pytest.raises(CosignError, match="set COSIGN_PASSWORD to the private key's password"):
        signer(key)


def test_no_password_and_no_terminal_is_a_usage_error_before_cosign_runs(keys, monkeypatch) -> None:
    monkeypatch.delenv("COSIGN_PASSWORD")
    with pytest.raises(UsageError, match="set COSIGN_PASSWORD to the private key's password"):
        signer(keys[0])


def test_missing_cosign_is_a_usage_error_with_the_install_line(keys) -> None:
    with pytest.raises(UsageError, match=r"cosign not found on PATH; install cosign \(Debian 13"):
        Cosign(keys[1], program="cosign-not-installed")


@pytest.mark.parametrize("key", ["no/such.pub", "ftp://host/key"])
def test_a_key_cosign_cannot_take_is_a_usage_error(key: str) -> None:
    with pytest.raises(UsageError, match="--verify-key"):
        check_key(key, "--verify-key")


def test_kms_uris_pass_as_they_are() -> None:
    assert check_key("awskms:///alias/bake", "--sign") == "awskms:///alias/bake"


def test_hub_blobs_attest_their_repository_commit_and_path_and_urls_lose_credentials() -> None:
    entry = HubEntry("org/model", "model", "a" * 40, (HubFile("config.json", 2, "b" * 64, "c" * 40),))
    blob = HubBlob("models--org--model", "c" * 40, ((entry, "config.json"),))
    hub = Asset(
        "h", f"hub/models--org--model/blobs/{'c' * 40}", "b" * 64, ("hf://org/model@x/c",), 2, hub=blob
    )
    plain = Asset("p", "p.bin", "d" * 64, ("https://user:pw@host/p.bin?token=t",))
    records = records_of([plain, hub], {"p.bin": 9})
    assert [r.document() for r in records] == [
        {"path": hub.path, "size": 2, "sha256": "b" * 64,
         "hub": [{"repo": "org/model", "kind": "model", "commit": "a" * 40, "path": "config.json"}]},
        {"path": "p.bin", "size": 9, "sha256": "d" * 64, "urls": ["https://user:***@host/p.bin?token=***"]},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("attested", "expected"),
    [
        ({"a": (1, "x")}, []),
        ({"a": (None, "x")}, []),
        ({}, ["omits a"]),
        ({"a": (1, "x"), "b": (2, "y")}, ["lists b, which is not selected"]),
        ({"a": (1, "z")}, ["a: sha256 z, expected x"]),
        ({"a": (2, "x")}, ["a: 2 bytes, expected 1"]),
    ],
)
def test_differences_compare_paths_sha256_and_known_sizes(attested, expected) -> None:
    assert differences(attested, [FileRecord("a", 1, "x")]) == expected


def test_statements_about_another_image_are_not_read() -> None:
    statement = {
        "_type": "https://in-toto.io/Statement/v0.1",
        "predicateType": PREDICATE_TYPE,
        "subject": [{"name": "r", "digest": {"sha256": "1" * 64}}],
        "predicate": predicate([], "m"),
    }
    assert read_statement(statement, "sha256:" + "1" * 64).manifest_digest == "m"
    with pytest.raises(ValueError, match="its subject is not the image"):
        read_statement(statement, "sha256:" + "2" * 64)
    with pytest.raises(ValueError, match="predicate type"):
        read_statement({**statement, "predicateType": "https://slsa.dev/provenance/v1"}, "sha256:" + "1" * 64)


@pytest.fixture
def image_cleanup(repository: str) -> Iterator[None]:
    """What `bake verify --image` and bake.testing pull into the engine goes at the end."""
    yield
    remove_images_named(repository)


def _plugin(*args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "BAKE_IMAGE"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs", "bake.testing", *args],
        cwd=REPO, env=clean, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip


def test_bake_verify_image_and_bake_testing_prove_a_signed_image(
    published, keys, repository: str, tmp_path: Path, image_cleanup: None
) -> None:
    key, pub = keys
    signed(published, key)
    block, _ = published
    ok = bake("verify", "--image", block.whole.pinned, "--key", pub, "--no-tlog", timeout=240)
    assert ok.returncode == 0, ok.stderr
    line = f"bake: {block.whole.pinned}: 4 asset(s) in 3 unit image(s) of {repository}, signed with {pub}"
    assert ok.stdout == line + "\n"
    _, other = key_pair(tmp_path, "other")
    bad = bake("verify", "--image", block.whole.pinned, "--key", other, "--no-tlog", timeout=240)
    assert bad.returncode == 3, bad.stderr
    assert "its assets are not proved published by the key's holder" in bad.stderr
    assert f"image {repository}@{block.whole.digest}: no signature on it verifies with {other}" in bad.stderr

    test = ["-k", "test_assets_are_signed", "--bake-image", block.whole.pinned, "--bake-no-tlog", "-rA"]
    passed = _plugin(*test, "--bake-verify-key", pub)
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout[-3000:]
    failed = _plugin(*test, "--bake-verify-key", other)
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert f"its assets are not proved published signed with {other}" in failed.stdout


def test_bake_testing_reports_signatures_not_applicable_without_a_key(
    published, repository: str, image_cleanup: None
) -> None:
    block, _ = published
    proc = _plugin("-k", "test_assets_are_signed", "--bake-image", block.whole.pinned, "-rs")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "not applicable: no --bake-verify-key given" in proc.stdout


def test_bake_verify_image_without_a_registry_host_needs_the_repository(keys) -> None:
    proc = bake("verify", "--image", "bake/rocm-test:local", "--key", keys[1])
    assert proc.returncode == 2
    assert "give --repository REPO" in proc.stderr


def write_manifest(path: Path, assets: list[Asset], signing: str = "", sized: bool = True) -> Path:
    """The manifest of ``assets`` (each its own entry, sized or not), after a ``[signing]`` table if any."""
    entries = [
        f'[[asset]]\nname = "{a.name}"\npath = "{a.path}"\nsha256 = "{a.sha256}"\n'
        + (f"size = {a.size}\n" if sized else "")
        + f'urls = ["{a.urls[0]}"]\n'
        for a in assets
    ]
    path.write_text(signing + "\n".join(entries))
    return path


def test_a_manifests_signing_table_is_what_pin_verifies_with(
    published, keys, tmp_path: Path, repository
) -> None:
    key, pub = keys
    block, assets = published
    plain = write_manifest(tmp_path / "plain.toml", assets)
    table = '[signing]\nverify-key = "cosign.pub"\ntlog = false\n\n'
    manifest = write_manifest(tmp_path / "assets.toml", assets, table)
    sign_block(block, manifest, [], signing.signer(key, tlog=False))
    verifier = pin_verifier(repository, manifest, None)
    assert (verifier.key, verifier.tlog) == (pub, False)
    verify_block(block, manifest, [], verifier)
    assert pin_verifier(repository, plain, None) is None
    _, other = key_pair(tmp_path, "other")
    assert pin_verifier(repository, manifest, other, no_tlog=True).key == other
    with pytest.raises(Unverified, match="5 of 5 image"):
        verify_block(block, manifest, [], pin_verifier(repository, manifest, other, no_tlog=True))


def test_digests_already_pinned_are_verified_too(published, keys, tmp_path: Path, repository: str) -> None:
    key, pub = keys
    block, assets = published
    manifest = write_manifest(tmp_path / "assets.toml", assets)
    sign_block(block, manifest, [], signing.signer(key, tlog=False))
    _, was = block.units[0]
    unsigned = repush(was, {"data/vocab.bin": b"something else"})
    lines = [("Dockerfile:3", was.pinned), ("Dockerfile:4", unsigned.pinned), ("Dockerfile:5", repository)]
    with pytest.raises(Unverified) as caught:
        verify_block(block, manifest, [], signer(pub), pinned=lines)
    message = str(caught.value).splitlines()
    assert message[0].startswith("1 of 6 image(s) failed verification")
    assert message[1:] == [
        f"  Dockerfile:4, pinned {repository}@{unsigned.digest}: it has no signature",
        f"Nothing was pinned; every Dockerfile is as it was. Publish with `bake publish --sign` and the "
        f"private half of {pub}, or find out who pushed these images",
    ]


def test_bake_verify_image_hashes_the_images_files_against_its_lock(
    published, keys, repository: str, image_cleanup: None
) -> None:
    _, assets = published
    lock = lock_document(assets, {a.path: a.size for a in assets})
    files = {path: data for unit in UNITS.values() for path, data in unit.items()}
    files["data/vocab.bin"] = files["data/vocab.bin"][:-1] + b"?"
    index = tar_of({"bake.lock.json": json.dumps(lock).encode()})
    tampered = push_image(repository, "tampered", [tar_of(files), index])
    proc = bake("verify", "--image", f"{repository}@{tampered}", "--key", keys[1], "--no-tlog", timeout=240)
    assert proc.returncode == 3, proc.stderr
    vocab = next(a for a in assets if a.path == "data/vocab.bin")
    assert "1 asset(s) differ from its bake.lock.json, so no signature can vouch for them" in proc.stderr
    assert f"data/vocab.bin: 1200 bytes, sha256 {sha256_of(files['data/vocab.bin'])}; " in proc.stderr
    assert f"the lock says 1200, {vocab.sha256}" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--dest", "d", "--key", "k.pub"],
        ["--image", "127.0.0.1:5000/x:y"],
        ["--image", "127.0.0.1:5000/x:y", "--key", "k.pub", "--dest", "d"],
        ["--image", "127.0.0.1:5000/x:y", "--key", "k.pub", "--manifest", "m.toml"],
        [],
    ],
    ids=["key with dest", "image without key", "image with dest", "image with manifest", "nothing"],
)
def test_verify_takes_a_destination_or_an_image_with_a_key(args: list[str]) -> None:
    proc = bake("verify", *args)
    assert proc.returncode == 2
    assert "verify takes --dest D [--manifest M], or --image REF --key KEY [--repository REPO]" in proc.stderr


def test_sizes_the_manifest_leaves_out_are_attested_from_the_index_lock(
    published, keys, tmp_path: Path
) -> None:
    key, pub = keys
    block, assets = published
    manifest = write_manifest(tmp_path / "assets.toml", assets, sized=False)
    sign_block(block, manifest, [], signing.signer(key, tlog=False))
    whole = next(s for s in subjects_of(block, assets, digest_of(assets)) if s.what == "image")
    (statement,) = signer(pub).attestations(whole.image, PREDICATE_TYPE)
    assert [(f["path"], f["size"]) for f in statement["predicate"]["files"]] == sorted(
        (a.path, a.size) for a in assets
    )
    verify_block(block, manifest, [], signer(pub))  # the manifest's selection: sizes unknown, sha256s equal

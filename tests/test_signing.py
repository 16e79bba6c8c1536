"""Signing and its checks (bake.signing, bake.cosign, bake.attestation) with the real cosign and registry.

Each test pushes small unit images, an index and a whole image to the toolchain's registry
(127.0.0.1:5000, distribution 2.8: no referrers API, so cosign's tag scheme) in a repository of its
own, and signs with a key pair it makes. Tests sign with ``--tlog-upload=false`` and verify with
``--insecure-ignore-tlog=true`` (``tlog=False``): these machines reach no transparency log.
The units of bake.cosign and bake.attestation alone are in tests/test_cosign.py and
tests/test_attestation.py; ``bake verify --image``'s own checks in tests/test_signed_image.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from bake import __version__, signing
from bake.asset import Asset
from bake.attestation import PREDICATE_TYPE, predicate, records_of
from bake.cosign import Unverified
from bake.index import lock_document
from bake.manifest import manifest_digest
from bake.publish import Block
from bake.signing import pin_verifier, sign, sign_block, subjects_of, verify, verify_block, verify_lock
from tests.registries import OCI_MANIFEST
from tests.runners import REPO, bake
from tests.signed import UNITS, key_pair, repush, signer

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


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

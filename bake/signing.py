"""Signed asset images: what ``bake publish --sign`` signs and attests, and what ``--verify-key`` proves.

The images of a published selection are its **subjects**: each unit image, the index and the
whole (``REPO:<manifest digest>``). ``sign`` gives each a signature by the key (cosign adds no
second one by the same key) and attaches bake's attestation (bake.attestation) to each unit and
to the whole, unless one with the same predicate is already there. ``verify`` proves that each
carries a signature by the key and that each unit's and the whole's attested files are the ones
the manifest selects; ``verify_lock`` proves the same for what an image's ``bake.lock.json``
records, finding the units through the whole image's attestation. Subjects are handled
concurrently, and every problem is named in one error, unit by unit.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import subprocess
import tarfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bake import layers, registry, served
from bake.asset import Asset
from bake.assets_image import check_repo, registry_digest
from bake.attestation import (
    PREDICATE_TYPE,
    Attested,
    FileRecord,
    differences,
    predicate,
    read_statement,
    records_of,
)
from bake.control_chars import escape
from bake.cosign import Cosign, CosignError, Unverified, check_key
from bake.errors import BakeError, BuildError
from bake.index import LOCK_NAME
from bake.manifest import load_manifest, manifest_digest, select
from bake.publish import INDEX_PREFIX, Block, Published
from bake.registry import split_repository

log = logging.getLogger(__name__)

# cosign runs at once: each is mostly registry round trips, so a few overlap well on two cores.
WORKERS = 4
T = TypeVar("T")
Check = Callable[[Attested], list[str]]


@dataclass(frozen=True)
class Subject:
    """One image to sign or verify: how messages name it, where it is, and what its attestation says.

    ``predicate`` is what ``sign`` attests (None: a signature only); ``check`` is what ``verify``
    requires of an attestation, returning the differences (None: a signature only).
    """

    what: str
    repository: str
    digest: str
    predicate: dict | None = None
    check: Check | None = None

    @property
    def image(self) -> str:
        """``REPO@sha256:…``: what cosign signs, by digest and never by a tag that can move."""
        return f"{self.repository}@{self.digest}"


def subjects_of(
    block: Block, assets: Sequence[Asset], manifest_digest: str, sizes: Mapping[str, int] | None = None
) -> list[Subject]:
    """Return the subjects of a published selection: each unit, the index, the whole.

    ``assets`` are the selected assets, ``sizes`` the sizes of those the manifest gives none
    (bake.lock.json's). A unit's attestation lists its assets; the whole's lists every asset and
    each unit's image digest.
    """
    by_path = {a.path: a for a in assets}
    repository = block.whole.ref.rpartition(":")[0]
    subjects = []
    for unit, published in block.units:
        records = records_of([by_path[path] for path in unit.paths], sizes)
        subjects.append(
            Subject(
                f"unit {unit.name}",
                repository,
                published.digest,
                predicate(records, manifest_digest, unit=unit.name),
                _files_are(records),
            )
        )
    units = {unit.name: published.digest for unit, published in block.units}
    records = records_of(assets, sizes)
    whole = Subject(
        "image",
        repository,
        block.whole.digest,
        predicate(records, manifest_digest, units=units),
        _whole_is(records, manifest_digest, set(units.values())),
    )
    return [*subjects, Subject("index", repository, block.index.digest), whole]


def _files_are(records: Sequence[FileRecord]) -> Check:
    return lambda attested: differences(attested.files, records)


def _whole_is(records: Sequence[FileRecord], manifest_digest: str, units: set[str] | None) -> Check:
    """The whole image's check: its files, its manifest digest and (when known) its units' digests."""

    def check(attested: Attested) -> list[str]:
        found = differences(attested.files, records)
        if attested.manifest_digest != manifest_digest:
            found.append(f"it names manifest digest {attested.manifest_digest}, expected {manifest_digest}")
        if units is not None and set(attested.units.values()) != units:
            found.append(
                f"it names unit images {', '.join(sorted(attested.units.values())) or 'none'}, expected "
                f"{', '.join(sorted(units))}"
            )
        return found

    return check


def sign(subjects: Sequence[Subject], cosign: Cosign) -> None:
    """Sign every subject and attach its attestation, unless the key's already are there.

    The subjects the key has not signed yet are signed in one cosign run, and each missing
    attestation is attached in one run of its own: cosign decrypts a key file at every run,
    which costs more than everything else it does here. Raises CosignError (exit 5) naming each
    subject cosign could not sign or attest.
    """
    failed = f"could not be signed with {cosign.key}"
    signed = _each(subjects, lambda subject: _signed(subject, cosign), failed)
    unsigned = [subject for subject, done in zip(subjects, signed, strict=True) if not done]
    if unsigned:
        try:
            cosign.sign([subject.image for subject in unsigned])
        except CosignError as exc:
            lines = "\n".join(f"  {s.what} {s.image}" for s in unsigned)
            raise CosignError(f"{len(unsigned)} image(s) {failed}: {exc}\n{lines}") from None
    attested = [subject for subject in subjects if subject.predicate is not None]
    _each(attested, lambda subject: _attest_one(subject, cosign), f"could not be attested with {cosign.key}")


def _signed(subject: Subject, cosign: Cosign) -> bool:
    """Whether the subject carries the key's signature already."""
    try:
        cosign.verify(subject.image)
    except Unverified:
        return False
    log.debug("%s %s: already signed with %s", subject.what, subject.image, cosign.key)
    return True


def _attest_one(subject: Subject, cosign: Cosign) -> None:
    """Attach the subject's attestation unless one with the same predicate verifies with the key."""
    try:
        statements = cosign.attestations(subject.image, PREDICATE_TYPE)
    except Unverified:
        statements = []
    if not any(statement.get("predicate") == subject.predicate for statement in statements):
        cosign.attest(subject.image, PREDICATE_TYPE, subject.predicate)


def verify(subjects: Sequence[Subject], cosign: Cosign) -> list[Attested | None]:
    """Prove every subject signed by the key, and its attestation (where it has a check) as expected.

    Returns each subject's matching attestation (None for a signature-only subject). Raises
    Unverified (exit 5) naming every subject that fails, CosignError when cosign cannot answer.
    """
    return _each(
        subjects, lambda subject: _verify_one(subject, cosign), f"failed verification with {cosign.key}"
    )


def _verify_one(subject: Subject, cosign: Cosign) -> Attested | None:
    cosign.verify(subject.image)
    if subject.check is None:
        return None
    closest: list[str] | None = None
    for statement in cosign.attestations(subject.image, PREDICATE_TYPE):
        try:
            attested = read_statement(statement, subject.digest)
        except ValueError as exc:
            closest = closest or [str(exc)]
            continue
        found = subject.check(attested)
        if not found:
            return attested
        if closest is None or len(found) < len(closest):
            closest = found
    raise Unverified(
        f"its attestation differs from what is expected: {'; '.join(closest or ['no bake attestation'])}"
    )


def _each(subjects: Sequence[Subject], work: Callable[[Subject], T], failed: str) -> list[T]:
    """Run ``work`` on every subject concurrently; raise one error naming each that failed, in order."""

    def attempt(subject: Subject) -> tuple[T | None, BakeError | None]:
        try:
            return work(subject), None
        except (Unverified, CosignError) as exc:
            return None, exc

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        outcomes = list(pool.map(attempt, subjects))
    problems = [(s, exc) for s, (_, exc) in zip(subjects, outcomes, strict=True) if exc is not None]
    if problems:
        kind = Unverified if any(isinstance(exc, Unverified) for _, exc in problems) else CosignError
        lines = "\n".join(f"  {s.what} {s.image}: {exc}" for s, exc in problems)
        raise kind(f"{len(problems)} of {len(subjects)} image(s) {escape(failed)}:\n{lines}")
    return [result for result, _ in outcomes]  # type: ignore[misc]


def lock_records(lock: Mapping) -> tuple[FileRecord, ...]:
    """The files an image's ``bake.lock.json`` records, as records to compare attestations with."""
    return tuple(FileRecord(e["path"], int(e["size"]), e["sha256"]) for e in lock["assets"])


def verify_lock(lock: Mapping, repository: str, cosign: Cosign) -> int:
    """Prove that what an image's lock records was published to ``repository`` and signed by the key.

    The whole image ``REPO:<manifest digest>`` and the index must carry the key's signature, the
    whole's attestation must list exactly the lock's files, and each unit image it names must be
    signed and attest files the lock records, together all of them. Returns the number of unit
    images checked. Raises Unverified (exit 5) naming each problem.
    """
    digest = lock["manifest_digest"]
    records = lock_records(lock)
    found = {
        ref: registry_digest(ref)
        for ref in (f"{repository}:{digest}", f"{repository}:{INDEX_PREFIX}{digest}")
    }
    absent = [ref for ref, value in found.items() if value is None]
    if absent:
        raise Unverified(
            f"{', '.join(absent)}: not in the registry, so nothing proves who published this image's assets "
            f"(manifest digest {digest}); name the repository they were published to (`bake publish "
            "--repository`), or publish them signed"
        )
    whole_digest, index_digest = found.values()
    whole, _ = verify(
        [
            Subject("image", repository, whole_digest, check=_whole_is(records, digest, None)),
            Subject("index", repository, index_digest),
        ],
        cosign,
    )
    assert whole is not None
    by_path = {r.path: r for r in records}
    units = [
        Subject("unit image", repository, unit, check=_within(by_path))
        for unit in sorted(set(whole.units.values()))
    ]
    covered = {path for attested in verify(units, cosign) if attested for path in attested.files}
    missing = sorted(set(by_path) - covered)
    if missing:
        raise Unverified(
            f"{len(missing)} file(s) of the image's lock are in no signed unit image of {repository}, first "
            f"{missing[0]}; publish the assets signed, then rebuild the image from the pinned units"
        )
    return len(units)


def verify_lock_with_key(lock: Mapping, repository: str, key: str, *, tlog: bool = True) -> int:
    """``verify_lock`` with cosign and ``key`` (a public key file or a KMS URI): the unit images checked.

    Raises UsageError for a key cosign cannot take or without cosign, Unverified or CosignError (exit
    5) for a failed proof.
    """
    return verify_lock(lock, repository, Cosign(check_key(key, "--key"), tlog=tlog))


def _within(by_path: Mapping[str, FileRecord]) -> Check:
    """A unit's check against a lock: every file it attests is one the lock records, as recorded."""

    def check(attested: Attested) -> list[str]:
        outside = [
            f"lists {p}, which the image's lock does not record" for p in attested.files if p not in by_path
        ]
        return outside + differences(attested.files, [by_path[p] for p in attested.files if p in by_path])

    return check


def signer(key: str, *, tlog: bool = True) -> Cosign:
    """cosign for ``publish --sign KEY``, made before anything is built or pushed.

    Raises UsageError (exit 2) without cosign, for a key cosign cannot take, or without the key's
    password where no terminal can ask; CosignError (exit 5) for a wrong password.
    """
    return Cosign.signer(check_key(key, "--sign"), tlog=tlog)


def pin_verifier(
    repository: str, manifest: str | Path | None, key: str | None, *, no_tlog: bool = False
) -> Cosign | None:
    """The cosign ``bake pin`` verifies with: ``--verify-key``, else the manifest's ``[signing]``; None
    when neither names a key. Raises UsageError (exit 2), after the repository's own check, for a key
    cosign cannot take, or without cosign.
    """
    check_repo(repository, option="--repository")
    if key:
        return Cosign(check_key(key, "--verify-key"), tlog=not no_tlog)
    signing = load_manifest(manifest, allow_http=True).signing if manifest is not None else None
    if signing is None:
        return None
    option = f"{manifest}: [signing] verify-key"
    return Cosign(check_key(signing.verify_key, option), tlog=signing.tlog and not no_tlog)


def sign_block(
    block: Block,
    manifest: str | Path,
    groups: Sequence[str],
    cosign: Cosign,
    sizes: Mapping[str, int] | None = None,
) -> None:
    """Sign and attest what ``bake publish`` published for a manifest's selection (see ``subjects_of``).

    A size the manifest leaves out comes from ``sizes``, else from the lock the index image holds.
    Raises CosignError (exit 5) naming each image cosign could not sign, BuildError when the
    registry cannot give the index's lock.
    """
    chosen = select(load_manifest(manifest, allow_http=True), groups)
    if sizes is None and any(asset.size is None for asset in chosen):
        sizes = lock_sizes(block)
    subjects = subjects_of(block, list(chosen), manifest_digest(chosen), sizes)
    sign(subjects, cosign)
    attested = sum(s.predicate is not None for s in subjects)
    log.info("signed %d image(s) with %s, and attested the files of %d", len(subjects), cosign.key, attested)


def verify_block(
    block: Block,
    manifest: str | Path,
    groups: Sequence[str],
    cosign: Cosign,
    pinned: Sequence[tuple[str, str]] = (),
) -> None:
    """Prove what ``bake pin`` is about to pin: every unit, the index and the whole signed with the key,
    and the units' and the whole's attestations listing what the manifest selects; and every digest in
    ``pinned`` (``(file:line, REPO[:TAG]@sha256:…)``, the lines already in the Dockerfiles) signed too.

    Raises Unverified (exit 5) naming each image that fails, CosignError when cosign cannot answer.
    """
    chosen = select(load_manifest(manifest, allow_http=True), groups)
    subjects = subjects_of(block, list(chosen), manifest_digest(chosen))
    subjects += pinned_subjects(pinned, {s.image for s in subjects})
    _refuse_pin(subjects, cosign)
    log.info("%d image(s) signed with %s, their attested files the manifest's", len(subjects), cosign.key)


def lock_sizes(block: Block) -> dict[str, int]:
    """The sizes ``bake.lock.json`` records, read from the index image the registry serves for ``block``.

    The index is one small layer; its lock has every file's size, the ones a manifest leaves out
    included. Raises BuildError when the registry does not serve it as bake published it.
    """
    ref = block.index.ref
    target = registry.Registry(_without_tag(ref))
    image = served.read(target, [ref])[ref]
    if image is None or image.digest != block.index.digest or len(image.layers) != 1:
        raise BuildError(
            f"{ref}: the registry no longer serves the index {block.index.digest}; publish again"
        )
    layer = image.layers[0]
    tar = _unpacked(target.blob(layer.digest, f"the layer of {ref}"), layer.media_type, ref)
    name = f"{layers.ROOT}/{LOCK_NAME}"
    try:
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            member = archive.extractfile(name)
            lock = json.loads(member.read() if member else b"")
        return {entry["path"]: int(entry["size"]) for entry in lock["assets"]}
    except (tarfile.TarError, KeyError, ValueError, TypeError) as exc:
        raise BuildError(f"{ref}: its layer holds no readable {name} ({type(exc).__name__}: {exc})") from None


def _unpacked(blob: bytes, media_type: str, ref: str) -> bytes:
    """A layer blob's tar: stored, gzip, or zstd (through the ``zstd`` program, as bake.layers writes it)."""
    if media_type.endswith("zstd"):
        proc = subprocess.run(["zstd", "-dcq"], input=blob, capture_output=True, check=False)
        if proc.returncode != 0:
            said = proc.stderr.decode(errors="replace").strip()
            raise BuildError(f"{ref}: cannot decompress its zstd layer ({said}); install zstd and rerun")
        return proc.stdout
    return gzip.decompress(blob) if media_type.endswith("gzip") else blob


def sign_published(image: Published, cosign: Cosign) -> None:
    """Sign one published image (the runtime image): a signature, no attestation. Raises CosignError."""
    sign([Subject("runtime", _without_tag(image.ref), image.digest)], cosign)


def verify_published(image: Published, cosign: Cosign, pinned: Sequence[tuple[str, str]] = ()) -> None:
    """Prove one published image (the runtime image), and the digests already ``pinned``, signed."""
    subject = Subject("runtime", _without_tag(image.ref), image.digest)
    _refuse_pin([subject, *pinned_subjects(pinned, {subject.image})], cosign)


def _refuse_pin(subjects: Sequence[Subject], cosign: Cosign) -> None:
    """``verify`` for ``bake pin``: a failure says that nothing was written, and what to do."""
    try:
        verify(subjects, cosign)
    except (Unverified, CosignError) as exc:
        raise type(exc)(
            f"{exc}\nNothing was pinned; every Dockerfile is as it was. Publish with `bake publish --sign` "
            f"and the private half of {cosign.key}, or find out who pushed these images"
        ) from None


def pinned_subjects(pinned: Sequence[tuple[str, str]], known: set[str] = frozenset()) -> list[Subject]:
    """Signature-only subjects for the digest-pinned references among ``pinned`` (where, reference)
    that are not ``known`` images (``REPO@sha256:…``) already."""
    subjects, seen = [], set(known)
    for where, ref in pinned:
        repository, _, digest = ref.partition("@")
        subject = Subject(f"{where}, pinned", _without_tag(repository), digest)
        if digest and subject.image not in seen:
            seen.add(subject.image)
            subjects.append(subject)
    return subjects


def _without_tag(ref: str) -> str:
    """``REPO`` of ``REPO[:TAG][@DIGEST]``: a tag is a colon in the last path component."""
    name = ref.partition("@")[0]
    head, slash, last = name.rpartition("/")
    return f"{head}{slash}{last.partition(':')[0]}"


def image_repository(ref: str) -> str | None:
    """The repository of ``REPO[:TAG][@DIGEST]``, or None when it names no registry host."""
    name = _without_tag(ref)
    host, _ = split_repository(name)
    return name if name.startswith(f"{host}/") else None

"""bake's in-toto predicate: what a signed asset image holds, file by file, and the check against it.

``bake publish --sign`` attaches one attestation to each unit image and one to the whole image
(``REPO:<manifest digest>``), with the predicate type ``PREDICATE_TYPE``. The predicate lists the
image's files, each with its path under the asset root, its size and sha256, and where it came
from: its URLs (credentials redacted), or for a Hub blob the repositories, commits and paths it
backs. It also names the manifest digest of the selection that was published and bake's version;
the whole image's lists its units and their image digests. docs/building.md ("Signing") is the
reference for users and policy writers.

Built from file records, never from how units are formed: whatever makes a unit, its records are
its assets'. Checked the other way by ``differences``: what an attestation lists against what a
manifest selects (or what an image's lock records).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bake import __version__
from bake.asset import Asset
from bake.urls import redact_url

PREDICATE_TYPE = "https://bake.dev/attestations/asset-files/v1"
# The in-toto statement types cosign writes (v0.1 to this day) and the ones a later cosign may.
STATEMENT_TYPES = ("https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1")


@dataclass(frozen=True)
class HubSource:
    """One Hub file a blob backs: the repository, its kind, the commit and the file's path there."""

    repo: str
    kind: str
    commit: str
    path: str


@dataclass(frozen=True)
class FileRecord:
    """One file of an image as attested: path, size (None: unknown), sha256, and its sources."""

    path: str
    size: int | None
    sha256: str
    urls: tuple[str, ...] = ()
    hub: tuple[HubSource, ...] = ()

    def document(self) -> dict:
        """The record as the predicate's JSON holds it (``urls`` or ``hub``, whichever it has)."""
        doc: dict = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.hub:
            doc["hub"] = [vars(source) for source in self.hub]
        else:
            doc["urls"] = list(self.urls)
        return doc


def records_of(assets: Iterable[Asset], sizes: Mapping[str, int] | None = None) -> tuple[FileRecord, ...]:
    """Return the records of ``assets``, sorted by path; a size missing from an asset comes from ``sizes``."""
    records = []
    for asset in assets:
        hub = ()
        if asset.hub is not None:
            hub = tuple(HubSource(e.repo, e.kind, e.commit, path) for e, path in asset.hub.uses)
        size = asset.size if asset.size is not None else (sizes or {}).get(asset.path)
        urls = () if hub else tuple(redact_url(url) for url in asset.urls)
        records.append(FileRecord(asset.path, size, asset.sha256, urls, hub))
    return tuple(sorted(records, key=lambda r: r.path))


def predicate(
    records: Iterable[FileRecord],
    manifest_digest: str,
    *,
    unit: str | None = None,
    units: Mapping[str, str] | None = None,
) -> dict:
    """Return the predicate for an image holding ``records``: a unit's (``unit``, its name) or the
    whole selection's (``units``: each unit's name and image digest)."""
    doc: dict = {
        "bake_version": __version__,
        "manifest_digest": manifest_digest,
        "files": [r.document() for r in sorted(records, key=lambda r: r.path)],
    }
    if unit is not None:
        doc["unit"] = unit
    if units is not None:
        doc["units"] = [{"name": name, "digest": digest} for name, digest in sorted(units.items())]
    return doc


@dataclass(frozen=True)
class Attested:
    """What one verified attestation says: its predicate's manifest digest, unit, units and files."""

    manifest_digest: str
    unit: str | None
    units: dict[str, str]
    files: dict[str, tuple[int | None, str]]


def read_statement(statement: object, digest: str) -> Attested:
    """Return what an in-toto statement about the image ``digest`` (``sha256:…``) attests.

    Raises ValueError, saying what is wrong, for a statement that is not bake's predicate about
    that image: another type, another subject, or a predicate without its fields.
    """
    if not isinstance(statement, dict) or statement.get("_type") not in STATEMENT_TYPES:
        raise ValueError("not an in-toto statement")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ValueError(f"predicate type {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    algorithm, _, hexdigest = digest.partition(":")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not any(
        isinstance(s, dict) and (s.get("digest") or {}).get(algorithm) == hexdigest for s in subjects
    ):
        raise ValueError(f"its subject is not the image {digest}")
    body = statement.get("predicate")
    try:
        files = {f["path"]: (f["size"], f["sha256"]) for f in body["files"]}
        units = {u["name"]: u["digest"] for u in body.get("units", [])}
        return Attested(str(body["manifest_digest"]), body.get("unit"), units, files)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"a predicate without its fields ({type(exc).__name__}: {exc})") from None


def differences(attested: Mapping[str, tuple[int | None, str]], expected: Sequence[FileRecord]) -> list[str]:
    """Return how the attested files (path -> size, sha256) differ from ``expected``; empty when alike.

    Sizes are compared where both sides know one (a manifest may leave a size out).
    """
    wanted = {r.path: r for r in expected}
    found = []
    for path in sorted(set(wanted) - set(attested)):
        found.append(f"omits {path}")
    for path in sorted(set(attested) - set(wanted)):
        found.append(f"lists {path}, which is not selected")
    for path in sorted(set(wanted) & set(attested)):
        size, sha256 = attested[path]
        record = wanted[path]
        if sha256 != record.sha256:
            found.append(f"{path}: sha256 {sha256}, expected {record.sha256}")
        elif None not in (size, record.size) and size != record.size:
            found.append(f"{path}: {size} bytes, expected {record.size}")
    return found

"""What a registry serves under a selection's tags, read at once and checked before bake trusts it.

A tag anyone can push to proves nothing by being there. ``bake publish`` counts a unit, the index or
the whole image as published, and ``bake pin`` writes its line, only once what the registry serves
under the tag has been checked:

- a unit image and the index hold exactly one layer each; the whole holds one per unit, then the
  index's;
- each layer's diff ID (its config's ``rootfs.diff_ids``) is the one of the tree bake built, when
  ``bake publish`` built it; otherwise the layer the whole image lists in that unit's place. One
  push wrote the whole with its units, so it is the record ``bake pin`` checks against without a
  build;
- distinct tags serve distinct images.

Any mismatch is one BuildError (exit 5) that names each tag, what was expected and what was
served, before anything is pushed or pinned. What this cannot catch: someone who replaced every
tag of a selection, the whole included, with images consistent among themselves. A rebuild
(``bake publish`` of a selection one of whose tags is missing) checks against the bytes again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bake import layers, registry
from bake.errors import BuildError

# The manifests a unit, the index or the whole may be: one image, never an index of several.
IMAGE_TYPES = (layers.MANIFEST_TYPE, "application/vnd.docker.distribution.manifest.v2+json")
# The layers they may hold: OCI tars as bake writes them, and the Docker engine's gzip tar.
LAYER_TYPES = (
    layers.TAR,
    f"{layers.TAR}+gzip",
    f"{layers.TAR}+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Image:
    """An image the registry serves under ``ref`` (``REPO:TAG``): its digest and its layers, in order."""

    ref: str
    digest: str
    layers: tuple[layers.Blob, ...]

    @property
    def diff_ids(self) -> tuple[str, ...]:
        return tuple(layer.diff_id for layer in self.layers)

    def shown(self) -> str:
        """How a message shows what is served: its digest and layer count, and a single layer's IDs."""
        if len(self.layers) == 1:
            return f"{self.digest}: 1 layer, diff ID {self.layers[0].diff_id}, blob {self.layers[0].digest}"
        listed = ", ".join(self.diff_ids[:3]) + (", …" if len(self.layers) > 3 else "")
        return f"{self.digest}: {len(self.layers)} layers" + (f" (diff IDs {listed})" if self.layers else "")


def read(target: registry.Registry, refs: Sequence[str]) -> dict[str, Image | None]:
    """Return what the registry serves for each ``REPO:TAG`` of ``target``'s repository (None: nothing).

    Two requests a tag (its manifest, then its config), the tags at once (registry.concurrently).
    Raises BuildError for an answer that is not a definite one, and for what is not one image.
    """

    def one(ref: str) -> Image | None:
        served = target.manifest(ref.rpartition(":")[2])
        return None if served is None else _image(target, ref, served)

    return dict(zip(refs, registry.concurrently(refs, one), strict=True))


def _image(target: registry.Registry, ref: str, served: registry.Served) -> Image:
    """Parse the manifest and fetch its config; raise BuildError when it is not one image."""

    def refuse(what: str) -> BuildError:
        return BuildError(
            f"the registry serves {ref} (as {served.digest}) as {what}, not an image bake publishes; "
            "someone pushed something else under this tag: delete it, run `bake publish` again, and "
            "rerun (nothing was pushed or pinned)"
        )

    try:
        doc = json.loads(served.body)
        media_type = doc.get("mediaType") or served.media_type
        described = [(d["mediaType"], d["digest"], d["size"]) for d in doc["layers"]]
        config = doc["config"]["digest"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise refuse("something that is no image manifest") from None
    if media_type not in IMAGE_TYPES:
        raise refuse(f"a {media_type!r}")
    for kind, digest, size in described:
        if kind not in LAYER_TYPES or not _DIGEST.fullmatch(str(digest)) or not _size(size):
            raise refuse(f"an image with a layer {kind!r} {digest!r} of {size!r} bytes")
    if not _DIGEST.fullmatch(str(config)):
        raise refuse(f"an image whose config is {config!r}")
    try:
        rootfs = json.loads(target.blob(config, f"the config of {ref}"))["rootfs"]
        diff_ids = [str(d) for d in rootfs["diff_ids"]]
    except (ValueError, KeyError, TypeError):
        raise refuse("an image whose config lists no diff IDs") from None
    if len(diff_ids) != len(described) or not all(_DIGEST.fullmatch(d) for d in diff_ids):
        raise refuse(f"an image of {len(described)} layers whose config lists diff IDs {diff_ids[:3]}")
    blobs = tuple(
        layers.Blob(str(kind), str(digest), size, diff_id)
        for (kind, digest, size), diff_id in zip(described, diff_ids, strict=True)
    )
    return Image(ref, served.digest, blobs)


def _size(size: object) -> bool:
    return isinstance(size, int) and not isinstance(size, bool) and size >= 0


@dataclass(frozen=True)
class Refs:
    """A selection's tags in block order: one per unit, then the index; and the whole's."""

    units: tuple[str, ...]
    index: str
    whole: str

    @property
    def layered(self) -> tuple[str, ...]:
        """The tags of one layer each, in the whole image's order."""
        return (*self.units, self.index)


@dataclass(frozen=True)
class Expected:
    """What a one-layer tag must serve: a diff ID, the blob when the record names it, and whose word it is."""

    diff_id: str
    blob: str | None
    why: str

    def shown(self) -> str:
        return (
            f"1 layer, diff ID {self.diff_id}"
            + (f", blob {self.blob}" if self.blob else "")
            + f" ({self.why})"
        )


def check(refs: Refs, images: Mapping[str, Image | None], built: Mapping[str, str] | None = None) -> None:
    """Check what the registry serves for ``refs`` (absent tags are skipped); raise BuildError on a mismatch.

    ``built`` maps each unit's and the index's tag to the diff ID of the layer bake built for it;
    without it, the whole image's layers are the record (see the module's rules).
    """
    whole = images.get(refs.whole)
    problems = _same_images(images) + _whole_problems(refs, whole, built)
    if built is not None:
        record = {ref: Expected(built[ref], None, "the tree bake built") for ref in refs.layered}
    elif whole is not None and len(whole.layers) == len(refs.layered):
        record = {
            ref: Expected(layer.diff_id, layer.digest, f"layer {i + 1} of {refs.whole}")
            for i, (ref, layer) in enumerate(zip(refs.layered, whole.layers, strict=True))
        }
    else:
        record = {}
    for ref in refs.layered:
        image, expected = images.get(ref), record.get(ref)
        if image is None:
            continue
        layer = image.layers[0] if len(image.layers) == 1 else None
        if (
            layer is None
            or (expected is not None and layer.diff_id != expected.diff_id)
            or (expected is not None and expected.blob is not None and layer.digest != expected.blob)
        ):
            problems.append(
                f"{ref}: expected {expected.shown() if expected else '1 layer'}; served {image.shown()}"
            )
    if problems:
        raise BuildError(
            f"the registry does not serve what bake publishes under {len(problems)} tag(s) of "
            f"{refs.whole.rpartition(':')[0]}; nothing was pushed or pinned:\n  "
            + "\n  ".join(problems)
            + "\nAnyone who can push to the repository can put other images under these tags: delete "
            "them (or publish to a repository only your publishers can push to), run `bake publish` "
            "again, and rerun"
        )


def _whole_problems(refs: Refs, whole: Image | None, built: Mapping[str, str] | None) -> list[str]:
    """The whole image's own mismatch: its layer count, or its diff IDs against the tree bake built."""
    count = len(refs.layered)
    if whole is None:
        return []
    if built is not None and whole.diff_ids != tuple(built[ref] for ref in refs.layered):
        return [
            f"{refs.whole}: expected {count} layers, those of the tree bake built; served {whole.shown()}"
        ]
    if built is None and len(whole.layers) != count:
        return [
            f"{refs.whole}: expected {count} layers (one per unit, then the index's); served {whole.shown()}"
        ]
    return []


def _same_images(images: Mapping[str, Image | None]) -> list[str]:
    """One line for each image that two or more tags serve: distinct tags are distinct images."""
    by_digest: dict[str, list[str]] = {}
    for ref, image in images.items():
        if image is not None:
            by_digest.setdefault(image.digest, []).append(ref)
    return [
        f"{', '.join(refs)}: expected {len(refs)} distinct images; served one, {digest}"
        for digest, refs in by_digest.items()
        if len(refs) > 1
    ]

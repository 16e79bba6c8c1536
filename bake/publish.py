"""``bake publish``: push bake's ``FROM scratch`` images from the installed package, each once.

For a manifest's selection (``bake pin`` pins them by digest in the Dockerfiles that use them):

- one **unit image** per asset unit, ``REPO:unit-<name>-<key>`` (bake.layers): that unit's files
  alone, one layer whose bytes depend on that unit alone, compressed by how well it compresses;
- the **index image** ``REPO:index-<manifest digest>``: ``bake.lock.json``, ``SHA256SUMS``,
  ``bake.serve``, ``bake.offline``, the alias links and the directories, the one layer every
  manifest change touches;
- the **whole** ``REPO:<manifest digest>``: the same layers in one image (no byte is pushed
  twice), for ``FROM``, an image mount, and ``bake build --assets-image``.

The tree is built by the Dockerfile's ``fetch`` and ``assets`` stages (the fetch stage checks the
digest, ``ASSET_DIGEST``), exported as a tar, split and pushed over the registry's HTTP API
(bake.registry), since the engine's own push would recompress every layer with gzip.

The **runtime image** ``REPO:<bake version>-<content>`` (``--runtime``) holds tini,
``bake-entrypoint`` and bake itself (the ``runtime`` stage). Its tag names the bake files it
carries, so a bake upgrade publishes a new one and ``bake pin --runtime --check`` flags the old
pin, while the asset layers stay as they are.

Everything the build needs comes from the installed package: bake's own source, and the
Dockerfile and scripts shipped as package data (``publish_files/``), assembled with the
manifest in a temporary build context. So it works from any directory, bake installed from
the wheel. Only the registry's definite "unknown" (``assets_image.registry_digest``) starts a
build; any other answer is exit 5 before anything is built.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake import __version__, layers, registry, served
from bake.assets_image import check_repo, publish_once, registry_digest
from bake.byte_sizes import shown_size
from bake.errors import BuildError
from bake.exit_status import describe_exit
from bake.manifest import load_manifest, manifest_digest, select

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parent
FILES = PACKAGE / "publish_files"
# Build-context path -> the package file it comes from (the layout docker/Dockerfile expects).
SHIPPED = {
    "docker/Dockerfile": "Dockerfile",
    "docker/fetch-assets.sh": "fetch-assets.sh",
    "docker/bake.sh": "bake.sh",
    "scripts/entrypoint.sh": "entrypoint.sh",
}
MANIFEST_IN_CONTEXT = "assets.toml"
# The index image's tag: this before the manifest digest (the whole tree's image has the digest alone).
INDEX_PREFIX = "index-"
# The variables docker-bake.hcl passes as build arguments, taken from the environment the same way.
BUILD_ARG_VARIABLES = ("FETCH_IMAGE", "ASSET_MIRRORS", "BAKE_FETCH_ARGS", "HF_ENDPOINT")
# A tag is at most 128 characters of [A-Za-z0-9_.-]; a local version's "+" is not among them.
_NOT_IN_TAG = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Published:
    """An image in the registry: ``ref`` (``REPO:TAG``) and the digest it serves."""

    ref: str
    digest: str

    @property
    def pinned(self) -> str:
        """``REPO:TAG@sha256:…``, the reference ``bake pin`` writes."""
        return f"{self.ref}@{self.digest}"


def context_files() -> dict[str, Path]:
    """Return every file of the build context but the manifest: context path -> installed file.

    bake's package (its source, without the shipped build files and caches) goes under
    ``bake/``; the shipped Dockerfile and scripts where docker/Dockerfile copies them from.
    Raises BuildError when the installation lacks a shipped file.
    """
    files = {}
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == FILES.name or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        if path.is_file():
            files[f"bake/{rel.as_posix()}"] = path
    for name, shipped in SHIPPED.items():
        source = FILES / shipped
        if not source.is_file():
            raise BuildError(
                f"{source}: missing from the installed bake; bake publish builds from it. "
                "Reinstall bake-assets (pip install --force-reinstall), or build from a complete checkout"
            )
        files[name] = source
    return files


def runtime_tag(files: Mapping[str, Path] | None = None) -> str:
    """Return the runtime image's tag: bake's version and the sha256 (12 hex) of the context files.

    The content part changes with any byte of bake, the Dockerfile or the scripts, so a tag
    never names two different bakes, even between releases. tini is the one part it does not
    name: it comes from FETCH_IMAGE's Debian package, at the build that first pushes the tag.
    """
    digest = hashlib.sha256()
    for name, path in sorted((files or context_files()).items()):
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return f"{_NOT_IN_TAG.sub('_', __version__)}-{digest.hexdigest()[:12]}"


def runtime_ref(repository: str) -> str:
    """Return ``REPO:<runtime tag>`` for the installed bake. Raises UsageError for a bad repository."""
    check_repo(repository, option="--repository")
    return f"{repository}:{runtime_tag()}"


def lookup(ref: str, publish_command: str) -> Published:
    """Return what the registry serves for ``ref``.

    Raises BuildError (exit 5) when it has none, telling the user to run ``publish_command``
    first, and when it gives no definite answer.
    """
    found = registry_digest(ref)
    if found is None:
        raise _not_published(ref, publish_command)
    return Published(ref, found)


def _not_published(ref: str, publish_command: str) -> BuildError:
    return BuildError(
        f"{ref} is not in the registry, so there is nothing to pin to; run `{publish_command}` "
        "first (it builds and pushes that image), then rerun"
    )


@dataclass(frozen=True)
class Block:
    """What ``bake publish`` published for a manifest: each unit's image, the index, and the whole.

    ``units`` and ``index`` are the block ``bake pin`` writes, in that order; ``whole`` is
    ``REPO:<manifest digest>``, every unit's layer and the index's in one image (the same blobs),
    for ``FROM``, image mounts and ``bake build --assets-image``.
    """

    units: tuple[tuple[layers.Unit, Published], ...]
    index: Published
    whole: Published

    def lines(self) -> list[str]:
        """``publish``'s stdout: ``unit NAME REF`` per unit, ``index REF``, then ``image REF``."""
        return [
            *(f"unit {unit.name} {published.pinned}" for unit, published in self.units),
            f"index {self.index.pinned}",
            f"image {self.whole.pinned}",
        ]


@dataclass(frozen=True)
class Selection:
    """The images a manifest and its groups name in REPO, known before anything is fetched."""

    repository: str
    digest: str
    units: tuple[layers.Unit, ...]

    def unit_ref(self, unit: layers.Unit) -> str:
        return f"{self.repository}:{unit.tag}"

    @property
    def refs(self) -> served.Refs:
        return served.Refs(tuple(map(self.unit_ref, self.units)), self.index_ref, self.whole_ref)

    @property
    def index_ref(self) -> str:
        return f"{self.repository}:{INDEX_PREFIX}{self.digest}"

    @property
    def whole_ref(self) -> str:
        return f"{self.repository}:{self.digest}"


def selection_of(manifest: Path, repository: str, groups: Sequence[str]) -> Selection:
    """Return the images of a manifest's selection.

    Past the layer budget, the smallest units are packed into one (bake.layers.fit_budget), which
    it says on stderr. Raises UsageError for a bad repository or manifest.
    """
    check_repo(repository, option="--repository")
    chosen = select(load_manifest(manifest, allow_http=True), groups)
    units, packed = layers.fit_budget(layers.units_of(chosen))
    if packed:
        log.warning("warning: %s", packed)
    return Selection(repository, manifest_digest(chosen), units)


def publish_assets(
    manifest: Path, repository: str, groups: Sequence[str], buildx_args: Sequence[str] = ()
) -> Block:
    """Make sure every unit image, the index and the whole are in the registry; push what is missing.

    The tree is built (the Dockerfile's ``assets`` stage, fetched and sealed, from the installed
    package) only when one of them is missing. Raises UsageError for a bad repository or
    manifest, BuildError (exit 5) when the registry gives no definite answer, serves under a tag
    something else than what bake published (bake.served), the build fails or a push fails.
    """
    chosen = selection_of(manifest, repository, groups)
    build_args = {
        "ASSET_MANIFEST": MANIFEST_IN_CONTEXT,
        "ASSET_GROUPS": " ".join(groups),
        "ASSET_DIGEST": chosen.digest,
    }
    extra = {MANIFEST_IN_CONTEXT: Path(manifest)}

    def build(tree: Path) -> None:
        _build(chosen.whole_ref, "assets", build_args, extra, buildx_args, f"type=tar,dest={tree}")

    return publish_selection(chosen, build)


def publish_selection(chosen: Selection, build: Callable[[Path], None]) -> Block:
    """Ask the registry for each image of ``chosen``, all at once, and check what it serves (bake.served).

    When one is missing, ``build(tree)`` writes the sealed tree's tar, which is split into the
    units and the index (bake.layers); what the registry has is checked against it, and what it
    lacks is pushed, the images at once. The one "ask, build, check, push" of ``bake publish``
    and ``bake build --assets-image``. Raises BuildError (exit 5) as publish_assets does.
    """
    target = registry.Registry(chosen.repository)
    refs = chosen.refs
    found = served.read(target, [*refs.layered, refs.whole])
    if None not in found.values():
        served.check(refs, found)
        log.info(
            "every unit, the index and the whole of %s are in the registry; nothing to build", refs.whole
        )
    else:
        missing = [ref for ref, image in found.items() if image is None]
        log.info("not in the registry yet: %s; building the assets tree to push them", ", ".join(missing))
        with tempfile.TemporaryDirectory(prefix="bake-layers-") as tmp:
            tree = Path(tmp) / "tree.tar"
            build(tree)
            built = _layers_of(chosen, tree, Path(tmp))
            served.check(refs, found, {ref: layer.diff_id for ref, layer in built.items()})
            found |= _push_missing(target, refs, found, built)
    return _block(chosen, found)


def _block(chosen: Selection, found: Mapping[str, served.Image | None]) -> Block:
    """The Block of what the registry serves for every image of ``chosen`` (none may be missing)."""
    published = {ref: Published(ref, image.digest) for ref, image in found.items() if image is not None}
    refs = chosen.refs
    units = tuple(zip(chosen.units, (published[ref] for ref in refs.units), strict=True))
    return Block(units, published[refs.index], published[refs.whole])


def _layers_of(chosen: Selection, tree: Path, tmp: Path) -> dict[str, layers.Layer]:
    """Split ``tree`` into the units' and the index's layers, compressed at once; {tag: layer}."""
    unit_tars, index_tar = layers.split(tree, chosen.units, tmp)
    tree.unlink()
    tars = [*(unit_tars[u.name] for u in chosen.units), index_tar]
    names = [*(f"unit {u.name}" for u in chosen.units), "index"]
    compressed = registry.concurrently(tars, layers.compress)
    for name, layer in zip(names, compressed, strict=True):
        _report(name, layer)
    return dict(zip(chosen.refs.layered, compressed, strict=True))


def _push_missing(
    target: registry.Registry,
    refs: served.Refs,
    found: dict[str, served.Image | None],
    built: dict[str, layers.Layer],
) -> dict[str, served.Image]:
    """Push each image ``found`` lacks, the one-layer ones together, then the whole; return what was pushed.

    A layer the registry already holds for a present image (the same diff ID, checked) is used as
    it is, so the units, the index and the whole keep naming the same blobs.
    """
    held = {layer.diff_id: layer for image in found.values() if image is not None for layer in image.layers}
    lacking = {ref: [held.get(layer.diff_id, layer)] for ref, layer in built.items() if found[ref] is None}
    try:
        pushed = _push_images(target, lacking)
        if found[refs.whole] is None:
            # Every layer is in the repository by now: the whole sends its config and manifest alone.
            every = [(found[ref] or pushed[ref]).layers[0] for ref in refs.layered]
            pushed |= _push_images(target, {refs.whole: every})
    except (OSError, ValueError) as exc:  # URLError is an OSError; ValueError, a host no URL holds
        raise registry.failure(refs.whole.rpartition(":")[0], exc) from None
    return pushed


def _push_images(
    target: registry.Registry, images: Mapping[str, Sequence[layers.Layer | layers.Blob]]
) -> dict[str, served.Image]:
    """Push ``images`` (tag -> layers): every blob they need at once, then every manifest at once.

    Two steps of round trips whatever the count (registry.concurrently keeps CONNECTIONS in
    flight): a blob is one mount-or-upload and its PUT, a manifest one PUT. A Blob, which the
    repository holds already, is not sent.
    """
    documents = {ref: layers.image(blobs) for ref, blobs in images.items()}
    uploads: dict[str, tuple[Path | None, bytes | None]] = {}
    for ref, blobs in images.items():
        config = documents[ref][0]
        uploads[f"sha256:{hashlib.sha256(config).hexdigest()}"] = (None, config)
        uploads |= {b.digest: (b.path, None) for b in blobs if isinstance(b, layers.Layer)}
    registry.concurrently(
        list(uploads.items()), lambda blob: target.push_blob(blob[0], path=blob[1][0], data=blob[1][1])
    )
    digests = registry.concurrently(
        list(images),
        lambda ref: target.put_manifest(ref.rpartition(":")[2], documents[ref][1], layers.MANIFEST_TYPE),
    )
    pushed = {}
    for ref, digest in zip(images, digests, strict=True):
        log.info("pushed %s@%s", ref, digest)
        held = tuple(layers.Blob(b.media_type, b.digest, b.size, b.diff_id) for b in images[ref])
        pushed[ref] = served.Image(ref, digest, held)
    return pushed


def _report(name: str, layer: layers.Layer) -> None:
    """One stderr line per layer: its size, its compression, its blob's size and digest."""
    ratio = layer.size / layer.tar_size if layer.tar_size else 1.0
    print(
        f"bake: {name}: {shown_size(layer.tar_size)} tar, {layer.compression}, {shown_size(layer.size)} "
        f"blob ({ratio:.2f}), {layer.digest}",
        file=sys.stderr,
    )


def lookup_block(manifest: Path, repository: str, groups: Sequence[str], publish_command: str) -> Block:
    """Return what the registry serves for each unit, the index and the whole, checked (bake.served).

    Raises BuildError (exit 5) when one is missing, telling the user to run ``publish_command``
    first; when the registry gives no definite answer; and when what it serves is not what bake
    published.
    """
    chosen = selection_of(manifest, repository, groups)
    refs = chosen.refs
    found = served.read(registry.Registry(repository), [*refs.layered, refs.whole])
    for ref, image in found.items():
        if image is None:
            raise _not_published(ref, publish_command)
    served.check(refs, found)
    return _block(chosen, found)


def publish_runtime(repository: str, buildx_args: Sequence[str] = ()) -> Published:
    """Make sure ``REPO:<runtime tag>`` is in the registry, building and pushing it if not (see above)."""
    return _publish(runtime_ref(repository), "runtime", {}, {}, buildx_args)


def _publish(
    ref: str,
    stage: str,
    build_args: Mapping[str, str],
    extra: Mapping[str, Path],
    buildx_args: Sequence[str],
) -> Published:
    build = functools.partial(_build, ref, stage, build_args, extra, buildx_args)
    return Published(ref, publish_once(ref, f"{stage} image", build))


def _from_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in BUILD_ARG_VARIABLES if os.environ.get(name)}


def secrets(env: Mapping[str, str]) -> list[str]:
    """Return the ``--secret`` options for what ``env`` holds: a Hub token, mirrors with credentials, a CA.

    They reach the fetch stage as BuildKit secrets only, never as build arguments (which land
    in provenance): the ids docker/Dockerfile's fetch stage mounts (hf_token, bake_mirrors,
    ca_bundle).
    """
    found = []
    if env.get("HF_TOKEN"):
        found.append("id=hf_token,env=HF_TOKEN")
    elif env.get("HF_TOKEN_FILE"):
        found.append(f"id=hf_token,src={env['HF_TOKEN_FILE']}")
    if env.get("BAKE_MIRRORS"):
        found.append("id=bake_mirrors,env=BAKE_MIRRORS")
    if env.get("SSL_CERT_FILE"):
        found.append(f"id=ca_bundle,src={env['SSL_CERT_FILE']}")
    return [arg for secret in found for arg in ("--secret", secret)]


def _build(
    ref: str,
    stage: str,
    build_args: Mapping[str, str],
    extra: Mapping[str, Path],
    buildx_args: Sequence[str],
    output: str | None = None,
) -> None:
    """Build ``stage`` in a temporary context (bake's files and ``extra``) and push it as ``ref``.

    With ``output`` (a buildx ``--output``), the stage goes there instead of to the registry.
    """
    with tempfile.TemporaryDirectory(prefix="bake-publish-") as tmp:
        context = Path(tmp) / "context"
        for name, source in {**context_files(), **extra}.items():
            target = context / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        cmd = ["docker", "buildx", "build", "--file", str(context / "docker/Dockerfile"), "--target", stage]
        for name, value in {**build_args, **_from_environment()}.items():
            cmd += ["--build-arg", f"{name}={value}"]
        # A plain image manifest (no attestation index): what the engine's docker driver pushes anyway.
        cmd += [
            *secrets(os.environ),
            "--provenance=false",
            "--output",
            output or f"type=image,name={ref},push=true",
        ]
        cmd += [*buildx_args, str(context)]
        log.info("running %s", shlex.join(cmd))
        try:
            # The build's own output goes to stderr: stdout carries the one line `bake publish` prints.
            returncode = subprocess.run(cmd, check=False, stdout=2).returncode
        except OSError as exc:
            raise BuildError(
                f"cannot run `docker buildx build`: {exc.strerror}; install the docker CLI with the buildx "
                "plugin (scripts/toolchain.sh) or put it on PATH"
            ) from exc
    if returncode != 0:
        raise BuildError(
            f"building {ref} failed ({describe_exit(returncode)}): `docker buildx build --target {stage}`; "
            "the build log above names the step that failed, and nothing was pushed"
        )

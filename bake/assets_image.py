"""The assets image of a bake definition: the one registry decision, and the manifest digest.

``bake build --assets-image REPO`` resolves the bake definition and works out the selection its
targets bake (``resolve``). The unit images, the index and the whole tree
(``REPO:<manifest digest>``, bake.publish) are looked up in the registry; when one is missing,
the targets' ``assets`` stage is built once more as a tar (the fetch stage checks the digest,
``ASSET_DIGEST``) and split and pushed as ``bake publish`` does. Then each target is built from
a copy of its Dockerfile whose ``COPY --from=assets`` line is the block of unit lines ``bake
pin`` writes, pinned to the digests the registry answered with: nothing is fetched, and each
unit is a layer of its own, as in an image pinned by hand. ``bake publish`` and ``bake pin`` ask
the registry through the same ``bake.registry.Registry.manifest``.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake import reference, registry
from bake.errors import BuildError, UsageError
from bake.exit_status import describe_exit
from bake.manifest import load_manifest, manifest_digest, select

log = logging.getLogger(__name__)

# The Dockerfile stage that holds the verified files; a named context of this name replaces it.
ASSETS_STAGE = "assets"


@dataclass(frozen=True)
class AssetsImage:
    """The assets image for one bake definition: its reference, its selection, and the targets that
    consume it, each with the Dockerfile it builds from."""

    ref: str
    digest: str
    targets: tuple[str, ...]
    manifest: Path = Path("docker/assets.toml")
    groups: tuple[str, ...] = ()
    dockerfiles: tuple[Path, ...] = ()

    @property
    def repository(self) -> str:
        return self.ref.rpartition(":")[0]

    def export_args(self, out: Path) -> list[str]:
        """Overrides that build the targets' assets stage as tars, ``out/<target>.tar``."""
        args: list[str] = []
        for name in self.targets:
            args += [
                "--set", f"{name}.target={ASSETS_STAGE}",
                "--set", f"{name}.output=type=tar,dest={out / name}.tar",
                "--set", f"{name}.args.ASSET_DIGEST={self.digest}",
            ]  # fmt: skip
        return args

    def consume_args(self, dockerfiles: Sequence[Path]) -> list[str]:
        """Overrides that build each target from its Dockerfile with the block in place of the stage.

        ``dockerfiles`` are the rewritten copies (bake.build), one per target, in a directory
        BuildKit is allowed to read.
        """
        args: list[str] = []
        for name, path in zip(self.targets, dockerfiles, strict=True):
            args += ["--set", f"{name}.dockerfile={path}"]
        return [*args, f"--allow=fs.read={dockerfiles[0].parent}"] if dockerfiles else args


def check_repo(repo: str, *, option: str = "--assets-image") -> str:
    """Return ``repo`` if it is a repository name by the distribution grammar, without tag or digest.

    Raises UsageError otherwise: the check comes before any engine or registry call.
    """
    last = repo.rsplit("/", 1)[-1]
    if ":" in last or "@" in last:
        raise UsageError(
            f"{option} {repo!r}: expected a repository such as registry.example/rocm-ci/bake-assets, "
            "without a tag or digest; bake tags it itself"
        )
    problem = reference.name_problem(repo)
    if problem:
        raise UsageError(
            f"{option} {repo!r}: not a repository name Docker can parse ({problem}); "
            "give one such as registry.example/rocm-ci/bake-assets"
        )
    return repo


def manifest_digest_of(path: str | Path, groups: Sequence[str]) -> str:
    """Return ``bake manifest digest --manifest PATH --group G…``: the one digest every command uses.

    Only the content counts for the digest; the URL policy is the fetch stage's business.
    Raises UsageError (ManifestError) for a manifest that cannot be read or breaks a rule.
    """
    return manifest_digest(select(load_manifest(path, allow_http=True), groups))


def resolve(directory: Path, bake_args: Sequence[str], repo: str) -> AssetsImage:
    """Resolve the bake definition in ``directory`` and return the assets image its targets need.

    The consumers are the targets that pass ``ASSET_MANIFEST`` (every target built
    from docker/Dockerfile does). Raises UsageError when there is none, when
    they bake different asset sets, or when an ``ASSET_DIGEST`` they carry
    disagrees with the manifest; BuildError when bake cannot print the definition.
    """
    check_repo(repo)
    definition = _print_definition(directory, bake_args)
    digests: dict[str, str] = {}
    sources: dict[str, tuple[Path, tuple[str, ...], Path]] = {}
    for name, target in sorted(definition.get("target", {}).items()):
        args = target.get("args") or {}
        if args.get("ASSET_MANIFEST") is None:
            continue
        sources[name] = _target_source(directory, name, target)
        digest = manifest_digest_of(*sources[name][:2])
        pinned = args.get("ASSET_DIGEST") or ""
        if pinned and pinned != digest:
            raise UsageError(
                f"target {name!r}: ASSET_DIGEST={pinned} but its manifest and groups give {digest}; "
                "set ASSET_DIGEST to `bake manifest digest` or leave it empty"
            )
        digests[name] = digest
    if not digests:
        raise UsageError(
            "--assets-image: none of the targets to build passes ASSET_MANIFEST, so none has an asset "
            f"layer to take from {repo}; build targets of docker/Dockerfile (for example `image`)"
        )
    if len(set(digests.values())) > 1:
        listing = ", ".join(f"{name}: {digest}" for name, digest in digests.items())
        raise UsageError(
            f"--assets-image: the targets bake different asset sets ({listing}); one assets image serves "
            "one manifest digest, so build them in separate runs"
        )
    digest = next(iter(digests.values()))
    manifest, groups, _ = next(iter(sources.values()))
    dockerfiles = tuple(source[2] for source in sources.values())
    return AssetsImage(f"{repo}:{digest}", digest, tuple(digests), manifest, groups, dockerfiles)


def registry_digest(ref: str) -> str | None:
    """Return the digest (``sha256:…``) of the manifest the registry serves for ``ref``, or None if none.

    The one place that decides present, missing or failed, for ``bake publish``, ``bake pin``
    and ``bake build --assets-image`` (bake.served asks through the same ``Registry.manifest``).
    The question goes to the registry itself (bake.registry, with the credentials ``docker
    login`` stored), and the digest is the sha256 of the bytes it serves, so a pin names what
    the registry serves. "Missing" is only its MANIFEST_UNKNOWN or NAME_UNKNOWN answer; anything
    else (an auth refusal, a rate limit, a token endpoint that fails, a network error) raises
    BuildError with its own message and what to do: it never starts a build and a push.
    """
    name, tag = _split_ref(ref)
    found = registry.Registry(name).manifest(tag)
    return None if found is None else found.digest


def _split_ref(ref: str) -> tuple[str, str]:
    """``REPO:TAG`` or ``REPO@sha256:…`` as (REPO, the tag or digest)."""
    name, at, digest = ref.partition("@")
    if at:
        return name.rpartition(":")[0] if ":" in name.rpartition("/")[2] else name, digest
    if ":" not in name.rpartition("/")[2]:
        return name, "latest"
    return name.rpartition(":")[0], name.rpartition(":")[2]


def publish_once(ref: str, what: str, build: Callable[[], None]) -> str:
    """Return the digest the registry serves for ``ref``, running ``build`` (which pushes it) only if none.

    The one "ask, build what is missing, ask again" of ``bake publish`` and ``bake build
    --assets-image``; ``what`` names the image in the log and the error (``assets image``).
    Raises BuildError (exit 5) when the registry gives no definite answer, or lacks ``ref``
    after ``build``; ``build`` raises its own errors.
    """
    found = registry_digest(ref)
    if found is not None:
        log.info("%s %s is in the registry (%s); nothing to build for it", what, ref, found)
        return found
    log.info("%s %s is not in the registry yet; building and pushing it", what, ref)
    build()
    found = registry_digest(ref)
    if found is None:
        raise BuildError(
            f"the {what} {ref} was built and pushed, but the registry does not have it; check the push "
            "in the build log above, and that the registry keeps what it accepts"
        )
    log.info("pushed %s@%s", ref, found)
    return found


def _print_definition(directory: Path, bake_args: Sequence[str]) -> dict:
    cmd = ["docker", "buildx", "bake", *bake_args, "--print"]
    try:
        proc = subprocess.run(cmd, cwd=directory, capture_output=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(
            f"cannot run `docker buildx bake --print` in {directory}: {exc}; install the docker CLI with the "
            "buildx plugin (scripts/toolchain.sh) or put it on PATH"
        ) from exc
    if proc.returncode != 0:
        how = describe_exit(proc.returncode, proc.stderr)
        raise BuildError(
            f"`docker buildx bake --print` failed in {directory} ({how}); "
            "fix the bake files or arguments it names"
        )
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise BuildError(
            f"`docker buildx bake --print` in {directory} printed no JSON definition ({exc}); "
            "check that the buildx plugin is version 0.13 or later"
        ) from None


def _target_source(directory: Path, name: str, target: dict) -> tuple[Path, tuple[str, ...], Path]:
    """A target's manifest, groups and Dockerfile, as paths on this machine."""
    context = target.get("context") or "."
    if "://" in context or context.startswith("git@"):
        raise UsageError(
            f"target {name!r}: --assets-image needs a local build context to read the manifest from, "
            f"saw {context!r}; build from a checkout"
        )
    args = target["args"]
    root = directory / context
    return (
        root / args["ASSET_MANIFEST"],
        tuple((args.get("ASSET_GROUPS") or "").split()),
        root / (target.get("dockerfile") or "Dockerfile"),
    )

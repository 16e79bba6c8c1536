"""``bake publish``: build bake's ``FROM scratch`` images from the installed package and push them once.

Two images, each pinned by digest in the Dockerfiles that use them (``bake pin``):

- the **assets image** ``REPO:<manifest digest>``: the verified asset layer alone (the
  Dockerfile's ``assets`` stage). Its tag is ``bake manifest digest`` with the same
  ``--group`` options, so a tag names exactly one set of assets, and the fetch stage checks
  the digest (``ASSET_DIGEST``) before anything is pushed under it.
- the **runtime image** ``REPO:<bake version>-<content>`` (``--runtime``): tini,
  ``bake-entrypoint`` and bake itself (the ``runtime`` stage). Its tag names the bake files
  it carries, so a bake upgrade publishes a new one and ``bake pin --runtime --check`` flags
  the old pin, while the assets image (and its large layer) stays as it is.

They are two images, not one with two layers: ``COPY --link --from=IMAGE / /`` copies a whole
image into one layer, so an image holding both would give the target a new asset layer
(hundreds of MiB, pushed and pulled again) on every bake upgrade.

Everything the build needs comes from the installed package: bake's own source, and the
Dockerfile and scripts shipped as package data (``publish_files/``), assembled with the
manifest in a temporary build context. So it works from any directory, bake installed from
the wheel. Only the registry's definite "unknown" (``assets_image.publish_once``, as for ``bake
build --assets-image``) starts a build; any other answer is exit 5 before anything is built.
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
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bake import __version__
from bake.assets_image import check_repo, manifest_digest_of, publish_once, registry_digest
from bake.errors import BuildError
from bake.process import describe_exit

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


def assets_ref(manifest: Path, repository: str, groups: Sequence[str]) -> str:
    """Return ``REPO:<manifest digest>``. Raises UsageError for a bad repository or manifest."""
    check_repo(repository, option="--repository")
    return f"{repository}:{manifest_digest_of(manifest, groups)}"


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
        raise BuildError(
            f"{ref} is not in the registry, so there is nothing to pin to; run `{publish_command}` "
            "first (it builds and pushes that image), then rerun"
        )
    return Published(ref, found)


def publish_assets(
    manifest: Path, repository: str, groups: Sequence[str], buildx_args: Sequence[str] = ()
) -> Published:
    """Make sure ``REPO:<manifest digest>`` is in the registry, building and pushing it if not.

    Returns what the registry serves. Raises UsageError for a bad repository or manifest,
    BuildError (exit 5) when the registry gives no definite answer or the build fails.
    """
    ref = assets_ref(manifest, repository, groups)
    build_args = {
        "ASSET_MANIFEST": MANIFEST_IN_CONTEXT,
        "ASSET_GROUPS": " ".join(groups),
        "ASSET_DIGEST": ref.rsplit(":", 1)[1],
    }
    extra = {MANIFEST_IN_CONTEXT: Path(manifest)}
    return _publish(ref, "assets", build_args, extra, buildx_args)


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
) -> None:
    """Build ``stage`` in a temporary context (bake's files and ``extra``) and push it as ``ref``."""
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
        cmd += [*secrets(os.environ), "--provenance=false", "--output", f"type=image,name={ref},push=true"]
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

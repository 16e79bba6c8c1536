"""``bake build``: check the build context, optionally export HEAD's tree, then run ``docker buildx bake``."""

from __future__ import annotations

import logging
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bake import assets_image as assets_image_mod
from bake.context import LISTING_LIMIT, ContextReport, check_context, export_context
from bake.errors import BuildError, ContextDirty
from bake.process import describe_exit

log = logging.getLogger(__name__)


def run_build(
    directory: Path,
    bake_args: Sequence[str],
    *,
    export: bool = False,
    strict: bool = False,
    assets_image: str | None = None,
) -> int:
    """Check DIRECTORY's context, then run ``docker buildx bake BAKE_ARGS`` there; return 0.

    A failed check raises its own error (ContextDirty, GitError) before anything is built. With
    ``export`` every target's context is an export of HEAD's tree (``--set *.context=DIR``), so
    untracked files, mode drift and uncommitted edits never reach BuildKit: tracked changes are
    then a warning naming them (unless ``strict``), and HEAD is built. With ``assets_image`` (a
    repository) the asset layer comes from ``REPO:<manifest digest>``, which is built and pushed
    first when the registry lacks it (see bake.assets_image). Raises BuildError when bake fails
    (its exit code in the message) or docker cannot be run, UsageError for an assets image that
    cannot serve the targets.
    """
    directory = Path(directory).absolute()
    if assets_image is not None:
        assets_image_mod.check_repo(assets_image)
    report = _checked(directory, export=export, strict=strict)
    with ExitStack() as stack:
        overrides: list[str] = []
        if export:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bake-context-")))
            exported = export_context(directory, tmp / "context")
            # buildx >= 0.20 refuses to read outside the working directory unless allowed.
            overrides = ["--set", f"*.context={exported}", f"--allow=fs.read={exported}"]
        elif report is not None and report.untracked:
            log.warning(
                "%d untracked file(s) in %s enter the build context (commit, ignore or .dockerignore them, "
                "or use --export): %s",
                len(report.untracked),
                report.root,
                ", ".join(report.untracked[:LISTING_LIMIT]),
            )
        args = [*overrides, *bake_args]
        if assets_image is not None:
            args += _assets_image_args(directory, args, assets_image)
        _bake(directory, args)
    return 0


def _assets_image_args(directory: Path, args: list[str], repo: str) -> list[str]:
    """Publish ``REPO:<manifest digest>`` if the registry lacks it; return the overrides that consume it."""
    image = assets_image_mod.resolve(directory, args, repo)
    found = assets_image_mod.publish_once(
        image.ref, "assets image", lambda: _bake(directory, [*args, *image.publish_args()])
    )
    return image.consume_args(found)


def _checked(directory: Path, *, export: bool, strict: bool) -> ContextReport | None:
    """Run the context check; return its report, or None when an export makes the changes moot."""
    try:
        return check_context(directory, strict=strict, export=export)
    except ContextDirty as exc:
        if strict:
            raise
        reason, _, listing = str(exc).partition("\n")
        if export:
            log.warning(
                "%s\n%s\n--export builds HEAD's tree: these changes are not in the build", reason, listing
            )
            return None
        way_forward = "; or run `bake build --export` to build HEAD's tree without them"
        raise ContextDirty("\n".join(filter(None, (reason + way_forward, listing)))) from None


def _bake(directory: Path, args: Sequence[str]) -> None:
    cmd = ["docker", "buildx", "bake", *args]
    log.info("running %s", shlex.join(cmd))
    try:
        returncode = subprocess.run(cmd, cwd=directory, check=False).returncode
    except OSError as exc:
        raise BuildError(
            f"cannot run `docker buildx bake` in {directory}: {exc.strerror}; install the docker CLI "
            "with the buildx plugin (scripts/toolchain.sh) or put it on PATH"
        ) from exc
    if returncode != 0:
        raise BuildError(
            f"docker buildx bake failed in {directory} ({describe_exit(returncode)}): `{shlex.join(cmd)}`; "
            "the build log above names the target and step that failed"
        )

"""``bake build``: check the build context, optionally export HEAD's tree, then run ``docker buildx bake``."""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bake import assets_image as assets_image_mod
from bake import pin, publish
from bake.context import LISTING_LIMIT, ContextReport, check_context, export_context
from bake.errors import BuildError, ContextDirty
from bake.exit_status import describe_exit

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
    repository) the asset layers come from the unit images in REPO, one layer per unit, published
    first when the registry lacks any (see bake.assets_image). Raises BuildError when bake fails
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
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bake-assets-image-")))
            args += _assets_image_args(directory, args, assets_image, tmp)
        _bake(directory, args)
    return 0


def _assets_image_args(directory: Path, args: list[str], repo: str, tmp: Path) -> list[str]:
    """Publish the units, index and whole the targets need if the registry lacks any; return the
    overrides that build each target from a copy of its Dockerfile holding the block (in ``tmp``)."""
    image = assets_image_mod.resolve(directory, args, repo)
    chosen = publish.selection_of(image.manifest, image.repository, image.groups)

    def build(tree: Path) -> None:
        _bake(directory, [*args, *image.export_args(tree.parent)])
        (tree.parent / f"{image.targets[0]}.tar").rename(tree)

    found = publish.publish_selection(chosen, build)
    block = [pin.BlockLine(unit.name, published.pinned) for unit, published in found.units]
    block.append(pin.BlockLine(None, found.index.pinned))
    copies = []
    for name, dockerfile in zip(image.targets, image.dockerfiles, strict=True):
        copy = tmp / f"{name}.Dockerfile"
        shutil.copyfile(dockerfile, copy)
        # The assets stage's one line, COPY --from=assets, becomes the block; nothing else changes.
        pin.pin_files([copy], assets_image_mod.ASSETS_STAGE, found.whole.pinned, check=False, block=block)
        copies.append(copy)
    return image.consume_args(copies)


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

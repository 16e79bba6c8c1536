"""``check-context --export``: HEAD's tree written with normal modes, so mode drift never reaches BuildKit."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from bake.context.git import git, git_env, open_repo
from bake.errors import UsageError

log = logging.getLogger(__name__)


def export_context(directory: Path, out: Path) -> Path:
    """Write HEAD's tree of DIRECTORY's repository to OUT, files 0644 or 0755, directories 0755.

    The tree goes through a temporary index (``GIT_INDEX_FILE``) and ``git checkout-index`` under
    umask 0022, so neither staged nor working-tree mode drift reaches BuildKit's cache keys. OUT
    appears complete or not at all. Returns OUT. Raises UsageError when OUT exists and is not an
    empty directory, or cannot be written; GitError when git could not answer.
    """
    repo = open_repo(Path(directory))
    out = Path(out).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(
            f"--export {out}: exists and is not an empty directory; expected a new or empty directory, "
            "pass another path or remove it first"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"--export {out}: cannot create it ({exc.strerror}); pass a writable path") from exc
    try:
        with tempfile.TemporaryDirectory(prefix="bake-index-") as tmp:
            env = git_env(GIT_INDEX_FILE=str(Path(tmp, "index")))
            git(repo.root, ["read-tree", repo.head], "export (read-tree)", env=env)
            git(
                repo.root,
                ["checkout-index", "--all", f"--prefix={staging}{os.sep}"],
                "export (checkout-index)",
                env=env,
                umask=0o022,
            )
        # mkdtemp made the root 0700; BuildKit sees the context root's mode too.
        staging.chmod(0o755)
        # rename(2) replaces an empty directory, so an existing empty OUT is fine.
        staging.replace(out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UsageError(f"--export {out}: cannot write it ({exc.strerror}); pass a writable path") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.debug("exported %s (HEAD %s) to %s", repo.root, repo.head[:12], out)
    return out

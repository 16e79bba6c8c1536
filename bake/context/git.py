"""Running git for the context checks: one repository, git's own environment kept out, every failure named."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.control_chars import escape
from bake.errors import GitError, UsageError
from bake.exit_status import describe_exit

# These would point git at another repository or index than the one DIRECTORY is in.
_REPO_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")
_GIT_HINT = (
    "run `git status` there to see what is wrong; a corrupt index can be rebuilt from HEAD "
    "with `rm .git/index && git reset`"
)


@dataclass(frozen=True)
class Repo:
    """A work tree's top level, its index file, object format and HEAD commit."""

    root: Path
    index: Path
    object_format: str
    head: str


def open_repo(directory: Path) -> Repo:
    """Return the repository DIRECTORY is in. Raises UsageError (not a directory) or GitError."""
    directory = directory.absolute()
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory; pass the path of a git work tree")
    proc = git(
        directory,
        ["rev-parse", "--show-toplevel", "--git-path", "index", "--show-object-format"],
        "repository lookup",
        # bake build takes no path: the one hint that holds for it and for check-context.
        hint="run it inside a git work tree: cd into one (bake check-context also takes its path)",
    )
    root, index, object_format = os.fsdecode(proc.stdout).splitlines()[:3]
    head = git(
        directory,
        ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        "HEAD lookup",
        ok=(0, 1),
    )
    if head.returncode == 1:
        raise GitError(
            f"HEAD lookup failed in {root}: HEAD names no commit (a repository with no commit yet, "
            "or an unborn branch), so there is nothing to check the context against; commit first"
        )
    return Repo(Path(root), directory / index, object_format, head.stdout.decode().strip())


def display(name: str) -> str:
    """Return a file name safe to print: undecodable bytes and control characters escaped."""
    return escape(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def git_env(**extra: str) -> dict[str, str]:
    """The environment git runs in: no variable that names another repository, no optional locks."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    # Our diffs must never wait on, or take, the lock a concurrent git holds on the index.
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env.update(extra)
    return env


def git(
    cwd: Path,
    args: Sequence[str],
    check: str,
    *,
    ok: tuple[int, ...] = (0,),
    env: dict[str, str] | None = None,
    umask: int = -1,
    hint: str = _GIT_HINT,
    stdin: bytes = b"",
) -> subprocess.CompletedProcess[bytes]:
    """Run git; any return code outside OK (a negative one is a signal) raises GitError naming CHECK."""
    cmd = ["git", *args]
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env or git_env(), input=stdin, capture_output=True, umask=umask, check=False
        )
    except OSError as exc:
        raise GitError(
            f"{check} failed in {cwd}: cannot run git ({exc.strerror}); install git or put it on PATH"
        ) from exc
    if proc.returncode not in ok:
        how = describe_exit(proc.returncode, proc.stderr)
        raise GitError(f"{check} failed in {cwd}: `{' '.join(cmd)}` {how}; {hint}")
    return proc

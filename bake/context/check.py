"""Build-context check: tracked content must match HEAD, file-mode drift is tolerated."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bake.context import dockerignore
from bake.context.git import Repo, display, git, open_repo
from bake.errors import ContextDirty, GitError

log = logging.getLogger(__name__)

LISTING_LIMIT = 50
_CHUNK = 1 << 20
# A staged change between these two modes, with the same blob, is executable-bit drift.
_REGULAR_MODES = frozenset({"100644", "100755"})
_DIFF_OPTS = ("--no-ext-diff", "--ignore-submodules=none")
_LIST_OPTS = ("--raw", "-z", "--no-abbrev", "-M", *_DIFF_OPTS)
_IGNORE_FILEMODE = ("-c", "core.fileMode=false")


@dataclass(frozen=True)
class ContextReport:
    """Outcome of a passed check: the repository top level and the untracked files a context would take."""

    root: Path
    untracked: tuple[str, ...]
    hidden: tuple[str, ...] = ()  # entries git status skips that differ; only under ``export``


@dataclass(frozen=True)
class _Change:
    """One ``git diff --raw`` record."""

    old_mode: str
    new_mode: str
    old_blob: str
    new_blob: str
    status: str
    paths: tuple[str, ...]

    @property
    def mode_only(self) -> bool:
        return (
            self.status == "M"
            and self.old_blob == self.new_blob
            and {self.old_mode, self.new_mode} <= _REGULAR_MODES
        )

    def name_status(self) -> str:
        return "\t".join((self.status, *map(display, self.paths)))

    def summary(self) -> str | None:
        """Return the line ``git diff --summary`` prints for this record, if any."""
        path = display(self.paths[-1])
        kind = self.status[0]
        if kind == "A":
            return f" create mode {self.new_mode} {path}"
        if kind == "D":
            return f" delete mode {self.old_mode} {path}"
        if kind in "RC":
            verb = "rename" if kind == "R" else "copy"
            return f" {verb} {display(self.paths[0])} => {path} ({int(self.status[1:] or 0)}%)"
        if self.old_mode != self.new_mode:
            return f" mode change {self.old_mode} => {self.new_mode} {path}"
        return None


def check_context(directory: Path, *, strict: bool = False, export: bool = False) -> ContextReport:
    """Check that the index and the working tree of DIRECTORY's repository hold HEAD's content.

    Mode-only changes (the executable bit) pass, staged or not. Returns the repository top level
    and the untracked files that neither git ignores nor ``.dockerignore`` excludes.

    Entries git's own diff does not look at (flagged skip-worktree or assume-unchanged, or
    passed through a clean filter) are compared by content, as checkout would write them. With
    ``export`` they only warn, since an export takes HEAD's bytes, and are returned as ``hidden``.

    Raises ContextDirty (exit 1) when tracked content differs, or with ``strict`` when untracked
    files would enter the context; its message is a reason line, then at most 50 lines in
    ``--name-status`` form and 50 in ``--summary`` form. Raises GitError (exit 4) when git could
    not answer, and UsageError when DIRECTORY is not a directory.
    """
    repo = open_repo(Path(directory))
    _verify_index_checksum(repo)
    staged = [
        c
        for c in _changes(git(repo.root, ["diff", "--cached", *_LIST_OPTS, "HEAD", "--"], "index check"))
        if not c.mode_only
    ]
    unstaged: list[_Change] = []
    quiet = git(
        repo.root,
        [*_IGNORE_FILEMODE, "diff", "--quiet", *_DIFF_OPTS, "--"],
        "working-tree check",
        ok=(0, 1),
    )
    if quiet.returncode == 1:
        listing = git(repo.root, [*_IGNORE_FILEMODE, "diff", *_LIST_OPTS, "--"], "working-tree listing")
        unstaged = _changes(listing)
    untracked = _untracked(repo.root)
    hidden = _hidden_changes(repo)
    if hidden and export:
        log.warning(
            "warning: %d tracked file(s) differ from HEAD behind git's back (%s); --export takes "
            "HEAD's bytes, so they stay out of the build",
            len(hidden),
            ", ".join(display(c.paths[0]) for c in hidden[:LISTING_LIMIT]),
        )
    elif hidden:
        unstaged += hidden
    if staged or quiet.returncode == 1 or (hidden and not export):
        raise ContextDirty(
            _dirty_message(repo, staged, unstaged, unstaged_found=bool(unstaged) or quiet.returncode == 1)
        )

    if strict and untracked:
        shown = "\n".join(untracked[:LISTING_LIMIT])
        raise ContextDirty(
            f"{repo.root}: {len(untracked)} untracked file(s) would enter the build context "
            f"(--strict){_first_shown(len(untracked))}; commit them, remove them, or exclude them "
            f"in .gitignore or .dockerignore\n{shown}"
        )
    return ContextReport(root=repo.root, untracked=tuple(untracked), hidden=tuple(c.paths[0] for c in hidden))


def _verify_index_checksum(repo: Repo) -> None:
    """Check the index file's trailing hash, which git itself only verifies in ``git fsck``.

    A truncated or scribbled-over index can otherwise be read as garbage entries and reported
    as differences (exit 1) instead of as the corruption it is (exit 4).
    """
    try:
        digest = hashlib.new(repo.object_format, usedforsecurity=False)
    except ValueError as exc:
        raise GitError(
            f"index check failed in {repo.root}: unknown object format {repo.object_format!r}; "
            "use a git and Python that both support it"
        ) from exc
    width = digest.digest_size
    try:
        size = repo.index.stat().st_size
    except FileNotFoundError:
        return  # No index file: git reads it as empty, and the index check lists every path.
    except OSError as exc:
        raise GitError(f"index check failed: cannot read {repo.index} ({exc.strerror})") from exc
    seen = "a file too short to hold the index header"
    if size >= 12 + width:
        with repo.index.open("rb") as fh:
            remaining = size - width
            while remaining > 0 and (block := fh.read(min(_CHUNK, remaining))):
                digest.update(block)
                remaining -= len(block)
            trailer = fh.read(width)
        # An all-zero trailer is how index.skipHash (git >= 2.40) writes it.
        if trailer in (digest.digest(), bytes(width)):
            return
        seen = f"trailer {trailer.hex()} but content hashing to {digest.hexdigest()}"
    raise GitError(
        f"index check failed in {repo.root}: {repo.index} is corrupt: expected a {repo.object_format} "
        f"checksum over its {size} bytes, saw {seen}; rebuild it from HEAD with "
        f"`rm {repo.index} && git reset` (staged changes are lost)"
    )


def _hidden_changes(repo: Repo) -> list[_Change]:
    """Return the index entries git's diff trusts without reading whose bytes differ from checkout's.

    Those are the entries flagged skip-worktree or assume-unchanged (``git ls-files -v`` tags
    them ``S`` or lower case), and those with a ``filter`` attribute, whose clean command decides
    what git's diff sees. Each one's working-tree bytes are compared with
    ``git cat-file --filters``, the bytes checkout would write.
    """
    listing = git(repo.root, ["ls-files", "-v", "-s", "-z"], "hidden-entry listing").stdout
    entries = {}  # path -> (tag, mode, blob) for stage-0 entries
    for record in listing.split(b"\0"):
        if record:
            meta, _, raw_path = record.partition(b"\t")
            tag, mode, blob, stage = meta.decode().split()
            if stage == "0" and mode != "160000":  # submodules are the submodule's business
                entries[os.fsdecode(raw_path)] = (tag, mode, blob)
    flagged = {p for p, (tag, _, _) in entries.items() if tag == "S" or tag.islower()}
    candidates = sorted(flagged | _filtered(repo.root, list(entries)))
    changes = []
    for path in candidates:
        tag, mode, blob = entries[path]
        why = "skip-worktree" if tag in "Ss" else "assume-unchanged" if tag.islower() else "clean filter"
        if _worktree_digest(repo.root / path, mode) != _checkout_digest(repo.root, path, blob):
            changes.append(_Change(mode, mode, blob, "0" * len(blob), f"M ({why})", (path,)))
    return changes


def _filtered(root: Path, paths: list[str]) -> set[str]:
    """Return the paths whose ``filter`` attribute is set, from one ``git check-attr --stdin``."""
    if not paths:
        return set()
    stdin = b"".join(os.fsencode(p) + b"\0" for p in paths)
    proc = git(root, ["check-attr", "-z", "--stdin", "filter"], "filter-attribute listing", stdin=stdin)
    fields = proc.stdout.split(b"\0")
    return {
        os.fsdecode(fields[i])
        for i in range(0, len(fields) - 2, 3)
        if fields[i + 2] not in (b"unspecified", b"unset")
    }


def _worktree_digest(path: Path, mode: str) -> str | None:
    """The sha256 of a working-tree entry (a link's target for mode 120000); None when it is absent."""
    digest = hashlib.sha256()
    try:
        if mode == "120000":
            digest.update(os.fsencode(os.readlink(path)))
        else:
            with path.open("rb") as fh:
                while block := fh.read(_CHUNK):
                    digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _checkout_digest(root: Path, path: str, blob: str) -> str:
    """The sha256 of the bytes checkout would write for BLOB at PATH (smudge filter and eol applied)."""
    proc = git(root, ["cat-file", "--filters", f"--path={path}", blob], f"checkout view of {display(path)}")
    return hashlib.sha256(proc.stdout).hexdigest()


def _untracked(root: Path) -> list[str]:
    proc = git(root, ["ls-files", "--others", "--exclude-standard", "-z"], "untracked listing")
    patterns = dockerignore.read_patterns(root / ".dockerignore")
    names = (os.fsdecode(raw).rstrip("/") for raw in proc.stdout.split(b"\0") if raw)
    return sorted(display(name) for name in names if not dockerignore.excluded(patterns, name))


def _dirty_message(
    repo: Repo, staged: list[_Change], unstaged: list[_Change], *, unstaged_found: bool
) -> str:
    where = " and ".join(
        part
        for part, found in (("the index (staged)", staged), ("the working tree (unstaged)", unstaged_found))
        if found
    )
    changes = staged + unstaged
    summaries = [line for line in (c.summary() for c in changes) if line]
    lines = [
        f"{repo.root}: tracked content differs from HEAD {repo.head[:12]} in {where}: "
        f"{len(changes)} change(s){_first_shown(len(changes))}; mode-only changes are tolerated, "
        "these are not. Commit or stash them (`git stash`), or build from a clean checkout",
        *(c.name_status() for c in changes[:LISTING_LIMIT]),
        *summaries[:LISTING_LIMIT],
    ]
    return "\n".join(lines)


def _first_shown(count: int) -> str:
    return f", the first {LISTING_LIMIT} listed" if count > LISTING_LIMIT else ""


def _changes(proc: subprocess.CompletedProcess[bytes]) -> list[_Change]:
    """Parse ``git diff --raw -z`` output: a header field, then one path, or two for renames and copies."""
    fields = proc.stdout.split(b"\0")
    changes = []
    i = 0
    while i < len(fields) and fields[i].startswith(b":"):
        old_mode, new_mode, old_blob, new_blob, status = fields[i][1:].decode().split()
        count = 2 if status[0] in "RC" else 1
        paths = tuple(os.fsdecode(p) for p in fields[i + 1 : i + 1 + count])
        changes.append(_Change(old_mode, new_mode, old_blob, new_blob, status, paths))
        i += 1 + count
    return changes

"""Build-context check: tracked content must match HEAD, file-mode drift is tolerated."""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bake.errors import ContextDirty, GitError, UsageError
from bake.text import escape

log = logging.getLogger(__name__)

LISTING_LIMIT = 50
_CHUNK = 1 << 20
# A staged change between these two modes, with the same blob, is executable-bit drift.
_REGULAR_MODES = frozenset({"100644", "100755"})
# These would point git at another repository or index than the one DIRECTORY is in.
_REPO_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")
_DIFF_OPTS = ("--no-ext-diff", "--ignore-submodules=none")
_LIST_OPTS = ("--raw", "-z", "--no-abbrev", "-M", *_DIFF_OPTS)
_IGNORE_FILEMODE = ("-c", "core.fileMode=false")
_GIT_HINT = (
    "run `git status` there to see what is wrong; a corrupt index can be rebuilt from HEAD "
    "with `rm .git/index && git reset`"
)


@dataclass(frozen=True)
class ContextReport:
    """Outcome of a passed check: the repository top level and the untracked files a context would take."""

    root: Path
    untracked: tuple[str, ...]
    hidden: tuple[str, ...] = ()  # entries git status skips that differ; only under ``export``


@dataclass(frozen=True)
class _Repo:
    root: Path
    index: Path
    object_format: str
    head: str


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
        return "\t".join((self.status, *map(_display, self.paths)))

    def summary(self) -> str | None:
        """Return the line ``git diff --summary`` prints for this record, if any."""
        path = _display(self.paths[-1])
        kind = self.status[0]
        if kind == "A":
            return f" create mode {self.new_mode} {path}"
        if kind == "D":
            return f" delete mode {self.old_mode} {path}"
        if kind in "RC":
            verb = "rename" if kind == "R" else "copy"
            return f" {verb} {_display(self.paths[0])} => {path} ({int(self.status[1:] or 0)}%)"
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
    repo = _open(Path(directory))
    _verify_index_checksum(repo)
    staged = [
        c
        for c in _changes(_git(repo.root, ["diff", "--cached", *_LIST_OPTS, "HEAD", "--"], "index check"))
        if not c.mode_only
    ]
    unstaged: list[_Change] = []
    quiet = _git(
        repo.root,
        [*_IGNORE_FILEMODE, "diff", "--quiet", *_DIFF_OPTS, "--"],
        "working-tree check",
        ok=(0, 1),
    )
    if quiet.returncode == 1:
        listing = _git(repo.root, [*_IGNORE_FILEMODE, "diff", *_LIST_OPTS, "--"], "working-tree listing")
        unstaged = _changes(listing)
    untracked = _untracked(repo.root)
    hidden = _hidden_changes(repo)
    if hidden and export:
        log.warning(
            "warning: %d tracked file(s) differ from HEAD behind git's back (%s); --export takes "
            "HEAD's bytes, so they stay out of the build",
            len(hidden),
            ", ".join(_display(c.paths[0]) for c in hidden[:LISTING_LIMIT]),
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


def export_context(directory: Path, out: Path) -> Path:
    """Write HEAD's tree of DIRECTORY's repository to OUT, files 0644 or 0755, directories 0755.

    The tree goes through a temporary index (``GIT_INDEX_FILE``) and ``git checkout-index`` under
    umask 0022, so neither staged nor working-tree mode drift reaches BuildKit's cache keys. OUT
    appears complete or not at all. Returns OUT. Raises UsageError when OUT exists and is not an
    empty directory, or cannot be written; GitError when git could not answer.
    """
    repo = _open(Path(directory))
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
            env = _env(GIT_INDEX_FILE=str(Path(tmp, "index")))
            _git(repo.root, ["read-tree", repo.head], "export (read-tree)", env=env)
            _git(
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


def _open(directory: Path) -> _Repo:
    directory = directory.absolute()
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory; pass the path of a git work tree")
    proc = _git(
        directory,
        ["rev-parse", "--show-toplevel", "--git-path", "index", "--show-object-format"],
        "repository lookup",
        # bake build takes no path: the one hint that holds for it and for check-context.
        hint="run it inside a git work tree: cd into one (bake check-context also takes its path)",
    )
    root, index, object_format = os.fsdecode(proc.stdout).splitlines()[:3]
    head = _git(
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
    return _Repo(Path(root), directory / index, object_format, head.stdout.decode().strip())


def _verify_index_checksum(repo: _Repo) -> None:
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


def _hidden_changes(repo: _Repo) -> list[_Change]:
    """Return the index entries git's diff trusts without reading whose bytes differ from checkout's.

    Those are the entries flagged skip-worktree or assume-unchanged (``git ls-files -v`` tags
    them ``S`` or lower case), and those with a ``filter`` attribute, whose clean command decides
    what git's diff sees. Each one's working-tree bytes are compared with
    ``git cat-file --filters``, the bytes checkout would write.
    """
    listing = _git(repo.root, ["ls-files", "-v", "-s", "-z"], "hidden-entry listing").stdout
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
    proc = _git(root, ["check-attr", "-z", "--stdin", "filter"], "filter-attribute listing", stdin=stdin)
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
    proc = _git(root, ["cat-file", "--filters", f"--path={path}", blob], f"checkout view of {_display(path)}")
    return hashlib.sha256(proc.stdout).hexdigest()


def _untracked(root: Path) -> list[str]:
    proc = _git(root, ["ls-files", "--others", "--exclude-standard", "-z"], "untracked listing")
    patterns = _read_dockerignore(root / ".dockerignore")
    names = (os.fsdecode(raw).rstrip("/") for raw in proc.stdout.split(b"\0") if raw)
    return sorted(_display(name) for name in names if not _dockerignored(patterns, name))


def _dirty_message(
    repo: _Repo, staged: list[_Change], unstaged: list[_Change], *, unstaged_found: bool
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


def _display(name: str) -> str:
    """Return a file name safe to print: undecodable bytes and control characters escaped."""
    return escape(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    # Our diffs must never wait on, or take, the lock a concurrent git holds on the index.
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env.update(extra)
    return env


def _git(
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
            cmd, cwd=cwd, env=env or _env(), input=stdin, capture_output=True, umask=umask, check=False
        )
    except OSError as exc:
        raise GitError(
            f"{check} failed in {cwd}: cannot run git ({exc.strerror}); install git or put it on PATH"
        ) from exc
    if proc.returncode not in ok:
        how = describe_exit(proc.returncode, proc.stderr)
        raise GitError(f"{check} failed in {cwd}: `{' '.join(cmd)}` {how}; {hint}")
    return proc


def describe_exit(returncode: int, stderr: bytes = b"") -> str:
    """Return how a process ended, e.g. ``exit 128: fatal: ...`` or ``killed by SIGABRT``."""
    if returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"killed by signal {-returncode}"
    else:
        how = f"exit {returncode}"
    said = "; ".join(line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip())
    return f"{how}: {said}" if said else how


# .dockerignore, as moby/patternmatcher reads and matches it (the code BuildKit uses).


@dataclass(frozen=True)
class _Pattern:
    text: str
    negated: bool  # a `!` line: it re-includes what earlier lines excluded
    kind: str  # exact, prefix, suffix or regexp, as patternmatcher picks it
    regex: re.Pattern[str] | None

    def match(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.text
        if self.kind == "prefix":
            return path.startswith(self.text[:-2])
        if self.kind == "suffix":
            suffix = self.text[2:]
            return path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
        assert self.regex is not None
        return self.regex.match(path) is not None


def _read_dockerignore(path: Path) -> list[_Pattern]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); fix its permissions") from exc
    patterns = []
    lines = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape").split("\n")
    for number, line in enumerate(lines, 1):
        if line.startswith("#"):
            continue
        text = line.strip()
        negated = text.startswith("!")
        if negated:
            text = text[1:].strip()
        if not text:
            if negated:
                raise UsageError(f"{path}:{number}: a lone `!` excludes nothing; remove the line")
            continue
        text = posixpath.normpath(text)
        if text.startswith("//"):
            text = "/" + text.lstrip("/")
        if len(text) > 1 and text.startswith("/"):
            text = text[1:]
        patterns.append(_compile(text, negated, f"{path}:{number}"))
    return patterns


def _compile(text: str, negated: bool, where: str) -> _Pattern:
    regex, kind, i = "^", "exact", 0
    first = True
    while i < len(text):
        ch = text[i]
        i += 1
        if ch == "*" and text[i : i + 1] == "*":
            i += 1
            if text[i : i + 1] == "/":
                i += 1
            if i == len(text):
                if kind == "exact":
                    kind = "prefix"
                else:
                    regex, kind = regex + ".*", "regexp"
            else:
                regex, kind = regex + "(.*/)?", "regexp"
            if first:
                kind = "suffix"
        elif ch == "*":
            regex, kind = regex + "[^/]*", "regexp"
        elif ch == "?":
            regex, kind = regex + "[^/]", "regexp"
        elif ch in ".+()|{}$":
            regex += "\\" + ch
        elif ch == "\\":
            if i < len(text):
                regex, kind = regex + "\\" + text[i], "regexp"
                i += 1
            else:
                regex += "\\"
        elif ch in "[]":
            regex, kind = regex + ch, "regexp"
        else:
            regex += ch
        first = False
    compiled = None
    if kind == "regexp":
        try:
            compiled = re.compile(regex + r"\Z")
        except re.error as exc:
            raise UsageError(f"{where}: bad pattern {text!r} ({exc}); fix the .dockerignore line") from exc
    return _Pattern(text, negated, kind, compiled)


def _dockerignored(patterns: Sequence[_Pattern], path: str) -> bool:
    """Return whether PATH (relative, '/'-separated) is excluded; a pattern on a parent excludes it too."""
    parts = path.split("/")
    parents = ["/".join(parts[:n]) for n in range(1, len(parts))]
    excluded = False
    for pattern in patterns:
        # A plain line can only exclude an included path, a `!` line only re-include an excluded one.
        if pattern.negated != excluded:
            continue
        if pattern.match(path) or any(pattern.match(p) for p in parents):
            excluded = not pattern.negated
    return excluded

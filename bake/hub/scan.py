"""Reading a Hub cache that a job filled, offline and without following a link: what can be pinned.

huggingface_hub's cache (``bake.hub.layout`` writes the same layout) holds, per repository
folder ``models--ORG--NAME``, ``refs/<ref>`` (a commit), ``snapshots/<commit>/<path>`` (a
relative link to ``../../blobs/<etag>``) and ``blobs/<etag>``, whose name is the file's
sha256 (LFS) or its git blob id. A file is pinnable when its link is exactly that relative
form, its blob is a regular file inside the folder and its bytes hash to its name. Nothing
outside the cache is ever opened: a link's target is judged by its text, a blob is opened
with ``O_NOFOLLOW | O_NONBLOCK`` after an ``lstat`` said it is a regular file (a FIFO
is never opened, so it cannot hang the scan).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass

from bake.byte_sizes import GIB
from bake.hashes import CHUNK, GIT_SHA1_HEX, SHA256_HEX, git_blob_id

log = logging.getLogger(__name__)

KIND_OF_PREFIX = {"models--": "model", "datasets--": "dataset"}
# A ref is a commit id and a newline at most; anything longer is not a ref.
MAX_REF_BYTES = 64
# Every cached byte is read once to be hashed (about 0.3 GiB/s here: docs/harvest.md); a file this
# large says so as it starts, and how far it got every PROGRESS_EVERY seconds.
PROGRESS_ABOVE = GIB
PROGRESS_EVERY = 5.0


@dataclass(frozen=True)
class CachedFile:
    """One snapshot file whose blob's bytes were proven against its name."""

    path: str
    size: int
    sha256: str
    blob: str
    lfs: bool


@dataclass(frozen=True)
class CachedCommit:
    """The files a run read from one repository at one commit, and the ref that named it, if any."""

    folder: str
    kind: str
    repo: str
    commit: str
    ref: str | None
    files: tuple[CachedFile, ...]


@dataclass(frozen=True)
class NotPinned:
    """Something a cache holds that cannot be pinned: where it is, and why; ``asset_path``, the path it
    would have under the asset root (a consumer's file), so that ``harvest --diff`` can find it baked."""

    where: str
    why: str
    asset_path: str | None = None


def lfs_pointer_blob(sha256: str, size: int) -> str:
    """The git blob id of an LFS file: that of its pointer file, which git-lfs writes canonically."""
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    return git_blob_id(pointer)


def what_is(mode: int) -> str:
    """How a message names a file type from its lstat mode."""
    for test, name in (
        (stat.S_ISLNK, "a link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a device"


def read_regular(path: str, limit: int | None = None) -> Iterator[bytes]:
    """Yield the bytes of the regular file at ``path``, never through a link and never blocking.

    Raises OSError (ELOOP for a link), or ValueError naming what is there instead of a regular
    file (a FIFO opens at once with O_NONBLOCK, and is refused before any read) or saying it
    holds more than ``limit`` bytes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{what_is(st.st_mode)}, not a regular file")
        if limit is not None and st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes, more than the {limit} it may hold")
        progress = _Progress(path, st.st_size) if st.st_size >= PROGRESS_ABOVE else None
        while block := os.read(fd, CHUNK):
            if progress is not None:
                progress.read(len(block))
            yield block
    finally:
        os.close(fd)


class _Progress:
    """One stderr line as a large file starts to be read (to hash it), and one every PROGRESS_EVERY s."""

    def __init__(self, path: str, size: int) -> None:
        self.path, self.size, self.done = path, size, 0
        self.shown = time.monotonic()
        log.info("reading %s (%.1f GiB) to hash it", path, size / GIB)

    def read(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self.shown >= PROGRESS_EVERY:
            self.shown = time.monotonic()
            log.info("reading %s: %.1f of %.1f GiB", self.path, self.done / GIB, self.size / GIB)


def _hashed(path: str, etag: str) -> tuple[int, str, str]:
    """Return (size, sha256, git blob id) of the blob at ``path``. Raises OSError or ValueError."""
    size = os.lstat(path).st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\x00" % size)
    got = 0
    for block in read_regular(path):
        got += len(block)
        sha256.update(block)
        if len(etag) == 40:
            sha1.update(block)
    if got != size:
        raise ValueError(f"changed while it was read ({size} bytes, then {got})")
    return size, sha256.hexdigest(), sha1.hexdigest()


class RepoScan:
    """One repository folder of a Hub cache: its pinnable commits and what it holds that is not."""

    def __init__(self, cache: str, folder: str, served_root: str) -> None:
        self.cache = cache
        self.folder = folder
        self.root = os.path.join(cache, folder)
        self.served_root = served_root
        self.problems: list[NotPinned] = []
        self._blobs: dict[str, CachedFile | str] = {}  # etag -> proven (path empty) or why not

    def _problem(self, rel: str, why: str) -> None:
        self.problems.append(NotPinned(os.path.join(self.root, rel), why))

    def _entries(self, rel: str) -> list[os.DirEntry]:
        """The entries of the real directory ``rel`` of the folder, or [] (a problem said) if none."""
        try:
            return sorted(os.scandir(os.path.join(self.root, rel)), key=lambda e: e.name)
        except OSError as exc:
            self._problem(rel, f"cannot be listed ({exc.strerror or exc})")
            return []

    def _dir(self, rel: str) -> str:
        """'' when ``rel`` is a real directory of the folder, else what is there ('missing' for nothing)."""
        try:
            mode = os.lstat(os.path.join(self.root, rel)).st_mode
        except FileNotFoundError:
            return "missing"
        return "" if stat.S_ISDIR(mode) else what_is(mode)

    def _served_link(self, path: str) -> bool:
        return served_link(path, self.served_root)

    def refs(self) -> dict[str, str]:
        """Map each commit a ref names to that ref (``main`` first); a bad ref is a problem."""
        found: dict[str, str] = {}
        if self._dir("refs"):
            return found
        for base, dirs, files in os.walk(os.path.join(self.root, "refs")):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(base, d))]
            for name in sorted(files):
                path = os.path.join(base, name)
                ref = os.path.relpath(path, os.path.join(self.root, "refs"))
                commit = self._ref_commit(path, ref)
                if commit is not None and (commit not in found or ref == "main"):
                    found[commit] = ref
        return found

    def _ref_commit(self, path: str, ref: str) -> str | None:
        rel = f"refs/{ref}"
        if self._served_link(path):
            return None
        try:
            text = b"".join(read_regular(path, MAX_REF_BYTES)).decode("ascii").strip()
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            self._problem(rel, f"not a readable ref ({getattr(exc, 'strerror', None) or exc})")
            return None
        if not GIT_SHA1_HEX.fullmatch(text):
            self._problem(rel, f"holds {text[:48]!r}, not a commit (40 lower-case hex characters)")
            return None
        if GIT_SHA1_HEX.fullmatch(ref):
            return None  # a commit is no ref: huggingface_hub never writes one
        if self._dir(f"snapshots/{text}"):
            self._problem(
                rel, f"names commit {text}, but snapshots/{text} is {self._dir(f'snapshots/{text}')}"
            )
            return None
        return text

    def partials(self) -> None:
        """Name each unfinished download in ``blobs/`` (``.incomplete``): never pinned."""
        if self._dir("blobs"):
            return
        for entry in self._entries("blobs"):
            if entry.name.endswith(".incomplete"):
                self._problem(
                    f"blobs/{entry.name}", "a partial download (.incomplete): the run never finished it"
                )

    def commits(self) -> Iterator[tuple[str, tuple[CachedFile, ...]]]:
        """Yield (commit, its proven files) for each snapshot directory named by a full commit."""
        if self._dir("snapshots"):
            return
        for entry in self._entries("snapshots"):
            rel = f"snapshots/{entry.name}"
            if self._served_link(entry.path):
                continue
            if not GIT_SHA1_HEX.fullmatch(entry.name):
                self._problem(rel, "a snapshot not named by a full commit (40 lower-case hex characters)")
                continue
            if self._dir(rel):
                self._problem(rel, f"{self._dir(rel)}, where a snapshot directory belongs")
                continue
            files = tuple(self._files(entry.name, ""))
            if files:
                yield entry.name, files

    def _files(self, commit: str, sub: str) -> Iterator[CachedFile]:
        base = f"snapshots/{commit}"
        for entry in self._entries(f"{base}/{sub}" if sub else base):
            path = f"{sub}/{entry.name}" if sub else entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                yield from self._files(commit, path)
            elif not stat.S_ISLNK(mode):
                self._problem(f"{base}/{path}", f"{what_is(mode)}, not a link to a blob: its ETag is unknown")
            elif not self._served_link(entry.path):
                proven = self._linked(path, entry.path)
                if isinstance(proven, str):
                    self._problem(f"{base}/{path}", proven)
                else:
                    yield CachedFile(path, proven.size, proven.sha256, proven.blob, proven.lfs)

    def _linked(self, path: str, link: str) -> CachedFile | str:
        """The proven blob behind snapshot file ``path``, or why it is not one."""
        target = os.readlink(link)
        up = "../" * (path.count("/") + 2)
        etag = target[len(up) + len("blobs/") :] if target.startswith(f"{up}blobs/") else ""
        if not (GIT_SHA1_HEX.fullmatch(etag) or SHA256_HEX.fullmatch(etag)):
            return f"a link to {target!r}, not to {up}blobs/<etag> of its own repository"
        if etag not in self._blobs:
            self._blobs[etag] = self._prove(etag)
        return self._blobs[etag]

    def _prove(self, etag: str) -> CachedFile | str:
        blob = os.path.join(self.root, "blobs", etag)
        if self._dir("blobs"):
            return f"its blobs/ directory is {self._dir('blobs')}"
        try:
            mode = os.lstat(blob).st_mode
            if not stat.S_ISREG(mode):
                return f"its blob {etag} is {what_is(mode)}, not a regular file"
            size, sha256, sha1 = _hashed(blob, etag)
        except FileNotFoundError:
            return f"a dangling link: its blob {etag} is missing"
        except (OSError, ValueError) as exc:
            return f"its blob {etag} cannot be read ({getattr(exc, 'strerror', None) or exc})"
        lfs = len(etag) == 64
        seen = sha256 if lfs else sha1
        if seen != etag:
            what = "sha256" if lfs else "git blob id"
            return f"its blob's bytes do not match its name: {what} {seen}, named {etag} (a damaged cache)"
        return CachedFile("", size, sha256, lfs_pointer_blob(sha256, size) if lfs else etag, lfs)


def served_link(path: str, served_root: str) -> bool:
    """True for a link the entrypoint made into the baked assets: bake's own, never a run's."""
    try:
        return os.readlink(path).startswith(served_root.rstrip("/") + "/")
    except OSError:
        return False


def repo_of(folder: str) -> tuple[str, str] | None:
    """(kind, ORG/NAME) of a repository folder ``models--ORG--NAME``, as huggingface_hub names it; or None."""
    prefix = next((p for p in KIND_OF_PREFIX if folder.startswith(p)), None)
    if prefix is None:
        return None
    return KIND_OF_PREFIX[prefix], folder[len(prefix) :].replace("--", "/", 1)


def scan_cache(cache: str, served_root: str) -> tuple[list[CachedCommit], list[NotPinned]]:
    """Read the Hub cache at ``cache``: the commits a run read, and what cannot be pinned.

    Links into ``served_root`` (the baked assets, which the entrypoint links into a job's
    cache) are bake's own and skipped. Raises OSError when ``cache`` cannot be listed.
    """
    commits: list[CachedCommit] = []
    problems: list[NotPinned] = []
    for entry in sorted(os.scandir(cache), key=lambda e: e.name):
        if entry.name.startswith(".") or "--" not in entry.name:
            continue
        parsed = repo_of(entry.name)
        if parsed is None:
            problems.append(NotPinned(entry.path, "not a model or dataset repository (spaces are not baked)"))
            continue
        if not entry.is_dir(follow_symlinks=False):
            if not os.path.islink(entry.path) or not RepoScan(cache, "", served_root)._served_link(
                entry.path
            ):
                problems.append(NotPinned(entry.path, "not a real directory: never followed"))
            continue
        scan = RepoScan(cache, entry.name, served_root)
        refs = scan.refs()
        scan.partials()
        for commit, files in scan.commits():
            commits.append(CachedCommit(entry.name, *parsed, commit, refs.get(commit), files))
        problems += scan.problems
    return commits, problems

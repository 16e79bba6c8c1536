"""The Hub's values: a repository pinned at a commit, its files, and the blob asset that backs them."""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "hub"
KINDS = ("model", "dataset")
DOWNLOADERS = ("bake", "huggingface_hub")
DEFAULT_DOWNLOADER = "bake"


@dataclass(frozen=True)
class HubFile:
    """One file of a pinned repository, as the Hub describes it at that commit."""

    path: str
    size: int
    sha256: str
    blob: str
    lfs: bool = False

    @property
    def etag(self) -> str:
        """The name of its contents in the Hub's cache: ``blobs/<etag>``."""
        return self.sha256 if self.lfs else self.blob


@dataclass(frozen=True)
class HubEntry:
    """A repository pinned at a commit, with the files selected from it."""

    repo: str
    kind: str
    commit: str
    files: tuple[HubFile, ...]
    ref: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    downloader: str = DEFAULT_DOWNLOADER

    def __hash__(self) -> int:
        # What names an entry (a repository is pinned once per commit); hashing its files too made
        # every set or dict of entries cost their file count, once per blob: quadratic in all.
        return hash((self.kind, self.repo, self.commit))

    @property
    def folder(self) -> str:
        """The repository's folder in the Hub's cache, as huggingface_hub's ``repo_folder_name``."""
        return f"{self.kind}s--" + self.repo.replace("/", "--")

    @property
    def label(self) -> str:
        """How messages name it: ``org/repo@commit`` (``datasets/org/repo@…`` for a dataset)."""
        prefix = "datasets/" if self.kind == "dataset" else ""
        return f"{prefix}{self.repo}@{self.commit}"

    @property
    def short_label(self) -> str:
        """``label`` with the commit cut to 12 characters, for asset names."""
        return self.label[: -len(self.commit)] + self.commit[:12]

    @property
    def whole_repo(self) -> bool:
        """True when no pattern narrowed the selection: the files are the whole tree at the commit."""
        return not self.include and not self.exclude

    def url(self, path: str) -> str:
        """The file's ``hf://`` URL, pinned at the commit."""
        prefix = "datasets/" if self.kind == "dataset" else ""
        return f"hf://{prefix}{self.repo}@{self.commit}/{path}"


@dataclass(frozen=True)
class HubBlob:
    """What one blob asset carries: its repository folder and ETag, and every snapshot file it backs."""

    folder: str
    etag: str
    uses: tuple[tuple[HubEntry, str], ...]

    @property
    def entries(self) -> tuple[HubEntry, ...]:
        """The entries this blob serves, each once, in manifest order."""
        return tuple(dict.fromkeys(entry for entry, _ in self.uses))


def blob_path(folder: str, etag: str) -> str:
    """The asset path of a blob: ``hub/<repo folder>/blobs/<etag>``."""
    return f"{PREFIX}/{folder}/blobs/{etag}"

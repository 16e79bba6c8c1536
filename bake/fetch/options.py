"""What a fetch is asked to do and what it reports: options, one record per asset, the failure of a run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bake.byte_sizes import GIB
from bake.errors import FetchError

# Four connections per asset. A single stream is what a per-connection
# throttle (the ~2 MiB/s mirror in the brief) caps, so more connections buy
# near-linear speed; four stays below the six per host that browsers open and
# servers are sized for, so a public mirror sees a polite client. Raise it with
# --connections for a mirror you run yourself.
DEFAULT_CONNECTIONS = 4

# A download of unknown size (no ``size`` in the manifest: `bake add`, the production checkpoint)
# stops at DEFAULT_MAX_SIZE, and before its filesystem's free space falls below the reserve:
# the smaller of DEFAULT_MIN_FREE and MIN_FREE_SHARE of that filesystem's size. 16 GiB is far
# above any single file the consumers fetch (the checkpoint is 925 MiB), yet it bounds a source
# that never ends; 1 GiB of reserve keeps a build host's disk usable for the build itself, and
# the share keeps a small disk (a CI runner's tmpfs, a laptop's nearly full one) usable for small
# files. Both are options (--max-size, --min-free); a file with a size is bounded by it.
DEFAULT_MAX_SIZE = 16 * GIB
DEFAULT_MIN_FREE = 1 * GIB
MIN_FREE_SHARE = 0.05
MIN_FREE_RULE = f"the smaller of {DEFAULT_MIN_FREE // GIB} GiB and {MIN_FREE_SHARE:.0%} of the filesystem"


@dataclass(frozen=True)
class FetchOptions:
    """How to fetch: cache, mirrors, network limits and retry budget.

    ``attempts`` bounds the failed attempts in a row, per source, that made no
    progress; an attempt that added bytes to the partial resets the count, so a
    slow but moving transfer is bounded by ``deadline`` instead.
    """

    cache_dir: Path
    mirrors: tuple[tuple[str, str], ...] = ()
    no_origin: bool = False
    connections: int = DEFAULT_CONNECTIONS
    attempts: int = 5
    timeout: float = 30.0
    deadline: float | None = None
    allow_http: bool = False
    ca_bundle: str | None = None
    jobs: int = 4
    max_size: int = DEFAULT_MAX_SIZE  # bytes a download of unknown size may reach
    min_free: int | None = None  # bytes such a download leaves free on its filesystem; None: MIN_FREE_RULE
    # bake add: each asset's sha256 is only the cache key of a file whose hash is not known
    # yet, so its bytes are kept whatever they hash to; the caller hashes them.
    unknown_sha256: bool = False
    started: float | None = None  # time.monotonic() the run began: the first assets' deadlines count from it


@dataclass(frozen=True)
class FetchRecord:
    """One installed asset: where it came from, bytes moved over the network this run, time and attempts."""

    name: str
    path: str
    source: str
    bytes: int
    size: int
    seconds: float
    attempts: int
    cached: bool
    sha256: str  # the cache object's name: the manifest's, or the digest bake add learnt


class FetchFailed(FetchError):
    """Some assets could not be fetched; every other asset was installed.

    ``failures`` maps each failed asset's name to its error; ``records`` holds
    the assets that did land.
    """

    def __init__(self, failures: dict[str, FetchError], records: list[FetchRecord]) -> None:
        self.failures = failures
        self.records = records
        total = len(failures) + len(records)
        lines = [f"{len(failures)} of {total} asset(s) could not be fetched:"]
        lines += [str(err) for err in failures.values()]
        super().__init__("\n".join(lines))

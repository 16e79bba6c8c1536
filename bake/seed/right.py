"""The right to copy into one location: flock where it works, an exclusive mkdir where it fails.

The lock is ``STATE/lock``, taken with the package's own flock (``bake.cache.try_flock``). Where
the lock call fails (ENOLCK, EOPNOTSUPP: NFS without lockd), the claim ``STATE/copying``, made
by mkdir (atomic on NFS too), stands in for it. A waiter that saw no partial make progress for
the stale bound takes over through the same claim: it moves a stale claim aside, then makes its
own. Neither right is needed for correctness: a lock that does not exclude (flock on NFS with
``local_lock``, Lustre with ``localflock``) lets two copiers copy, each into its own partial, and
the second install finds the first's verified file; it costs one copy more, never a failure.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat

from bake.cache import try_flock
from bake.seed import nodefs
from bake.seed.liveness import CLAIM, unique

LOCK = "lock"
# What a lock call says where the filesystem has no working locks.
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class Right:
    """The lock file of one state directory, and this process's hold on the right to copy there.

    ``take`` tries once without waiting; ``take_over`` replaces a stale claim; ``release`` gives up
    what this process holds. ``note`` says why the claim stands in for the lock, where it does."""

    def __init__(self, state_fd: int, where: str) -> None:
        self.state_fd, self.where = state_fd, where
        self.mode = "flock"
        self.note = ""
        self.claimed = False
        self.fd = _open_lock(state_fd, f"{where}/{LOCK}")

    def take(self) -> bool:
        """Take the right to copy, without waiting: False while another copier holds it."""
        if self.mode == "flock":
            try:
                if not try_flock(self.fd, fcntl.LOCK_EX):
                    return False
            except OSError as exc:
                if exc.errno not in NO_LOCKS:
                    raise
                self.mode = "claim"
                self.note = (
                    f"flock on {self.where}/{LOCK} failed: {exc.strerror}, so an exclusive mkdir of "
                    f"{CLAIM} stands in for the lock"
                )
            else:
                # The lock is this process's; a claim there is a copier that took over from a stopped one.
                return not self.claim_held()
        return self._claim()

    def claim_held(self) -> bool:
        """Whether a claim is there (a copier holds it); raises Planted for anything else at its name."""
        st = nodefs.lstat(self.state_fd, CLAIM)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise nodefs.Planted(f"the lock {self.where}/{CLAIM}", nodefs.kind(st.st_mode))
        return st is not None

    def _claim(self) -> bool:
        try:
            os.mkdir(CLAIM, 0o755, dir_fd=self.state_fd)
        except FileExistsError:
            self.claim_held()  # a directory: another copier's; anything else is named
            return False
        except OSError as exc:
            raise nodefs.Unwritable(f"cannot make the lock {self.where}/{CLAIM}", exc) from None
        self.claimed = True
        return True

    def take_over(self, stale_claim: int | None) -> bool:
        """After the stale bound without progress: move the claim aside (one judge wins the rename) when it
        is still the one the judge saw stand still (inode ``stale_claim``), remove it, and claim the right.
        Returns whether this process now holds it."""
        st = nodefs.lstat(self.state_fd, CLAIM)
        if st is not None and st.st_ino != stale_claim:
            return False  # a new claim since the judge looked: progress, not a dead copier
        if self.claim_held():
            aside = unique("stale.")
            with contextlib.suppress(FileNotFoundError):
                os.rename(CLAIM, aside, src_dir_fd=self.state_fd, dst_dir_fd=self.state_fd)
                nodefs.remove_tree(self.state_fd, aside)
        return self._claim()

    def release(self) -> None:
        """Give up the claim this process made, and the lock (closing its descriptor)."""
        if self.claimed:
            with contextlib.suppress(OSError):  # gone already: a judge took it as stale
                os.rmdir(CLAIM, dir_fd=self.state_fd)
            self.claimed = False
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _open_lock(state_fd: int, path: str) -> int:
    """Open the lock file, as a new file or a regular one there already, never through a link.

    Another user's lock (0644) is opened read-only: flock needs no write access."""
    try:
        return os.open(
            LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=state_fd
        )
    except FileExistsError:
        pass
    except OSError as exc:
        raise nodefs.Unwritable(f"cannot make the lock {path}", exc) from None
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            return nodefs.open_regular(state_fd, LOCK, f"the lock {path}", flags)
        except PermissionError as exc:
            error = exc
    raise nodefs.Unwritable(f"cannot open the lock {path}", error)

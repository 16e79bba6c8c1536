"""A job-local view of a directory a re-pointed variable named: every entry of it stays in view.

Where a location cannot be served in node storage, its variable is pointed, for this job only, at
a private directory under ``TMPDIR``. That directory links every regular file and directory of the
one the variable named (with ``HF_HOME``: the fleet's whole Hub cache), so the job loses sight of
nothing; the path down to SUB is made of real directories, and what the consumer serves is left
free for the entrypoint's linked view. Links, special files, bake's state and ``*.lock`` files are
never linked into a view.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from bake.seed import nodefs


def make(tmp: Path, var: str, base: Path, sub: str, free: set[str]) -> Path:
    """Make ``tmp/bake-VAR.XXXXXX`` (0700) viewing ``base``, with real directories along ``sub``.

    ``free`` are the names left out at the view's top when there is no ``sub`` (the consumer's).
    Returns the view. Raises OSError when it cannot be made."""
    tmp.mkdir(parents=True, exist_ok=True)
    view = Path(tempfile.mkdtemp(prefix=f"bake-{var}.", dir=tmp))
    here, source = view, base
    parts = sub.split("/") if sub else []
    for part in parts:
        _link_entries(source, here, {part})
        (here / part).mkdir()
        here, source = here / part, source / part
    if not parts:
        _link_entries(source, here, free)
    return view


def _link_entries(source: Path, into: Path, leave: set[str]) -> None:
    """A link in ``into`` to each regular file and directory of ``source`` (never through a link) but
    the names in ``leave``, bake's own and lock files."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # nothing there to keep in view
    try:
        for name in os.listdir(fd):
            if name in leave or name.endswith(".lock"):
                continue
            st = nodefs.lstat(fd, name)
            if st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                os.symlink(source / name, into / name)
    finally:
        os.close(fd)

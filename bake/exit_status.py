"""How a child process ended, in the words a message needs: its exit code or signal, and what it said."""

from __future__ import annotations

import signal


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

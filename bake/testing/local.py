"""The running system under test (``--bake-local``): the job's own container, as a native pod runs it.

A native pod replaces the image's ENTRYPOINT, so there is no image to open and no engine to ask:
the runner's line (``bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"``) has
already served the assets in this very environment. This reads the asset root from the
filesystem and runs each probe as a child of this process, with this environment, so what it
checks is what the job that follows will see. It imports nothing beyond the standard library.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from bake.testing.image import DEFAULT_ROOT, SMALL_FILE, ImageError, JobResult

# The directory holding the bake package that runs this plugin: the probes import the same bake.
OWN_LIB = str(Path(__file__).resolve().parents[2])


class RunningSystem:
    """The system pytest runs on, with its asset root (``BAKE_ASSETS``, else the image layout's)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.asset_root = self.environ.get("BAKE_ASSETS") or DEFAULT_ROOT
        self.ref = f"the running system (assets at {self.asset_root})"
        self.lib = OWN_LIB

    def read_file(self, path: str) -> bytes | None:
        """Return the bytes of a small regular file, or None when it is absent."""
        try:
            with open(path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size > SMALL_FILE:
                    raise ImageError(f"{path} is larger than {SMALL_FILE} bytes; expected a small document")
                return handle.read()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise ImageError(f"{path} is a directory; expected a file written by `bake seal`") from None

    def run(
        self, *command: str, environment: Mapping[str, str] | None = None, timeout: float = 120
    ) -> JobResult:
        """Run ``command`` here, in this environment plus ``environment``; return its exit code and output.

        ``python3`` and ``bake`` are this interpreter and its bake, so a probe sees what the plugin sees.
        """
        argv = list(command)
        if argv[:1] == ["python3"]:
            argv[0] = sys.executable
        elif argv[:1] == ["bake"]:
            argv[:1] = [sys.executable, "-m", "bake"]
        env = {**self.environ, **(environment or {})}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.lib, env.get("PYTHONPATH", "")) if p)
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return JobResult(
                -1, out, f"bake.testing: the job did not finish within {timeout} s; it was killed"
            )
        except OSError as exc:
            return JobResult(127, "", f"bake.testing: cannot run {argv[0]}: {exc}")
        return JobResult(proc.returncode, proc.stdout, proc.stderr)

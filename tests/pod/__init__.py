"""Native pods: a runner exports per-job caches, evals bake's one line, then starts a job that checks
every consumer location (runner.sh, job.py beside this file)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.serve import Shell

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENTRYPOINT = REPO / "scripts" / "entrypoint.sh"
RUNNER = HERE / "runner.sh"
RUNNER_TOO_EARLY = HERE / "runner-too-early.sh"
JOB = HERE / "job.py"
# The one line a runner adds after its own exports; docs/runtime.md shows it, runner.sh runs it.
# Taking the output first keeps bake-entrypoint's exit status: `eval "$(...)"` alone returns 0.
SNIPPET = 'bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"'
# Where each consumer kind's files are served: asset prefix -> the job's location names.
SERVED_AT = {"s3tokenizer": ("s3tokenizer",), "tiktoken": ("tiktoken-rs", "tiktoken")}


def expectations(
    files: Mapping[str, str], declared: Mapping[str, Sequence[str]] | None = None
) -> dict[str, dict[str, str]]:
    """Map ``{asset path: sha256}`` to job.py's ``{location: {file name: sha256}}``.

    Built-in consumers go by the name of their lookup rule; ``declared`` consumers (name to
    location strings, as the manifest declares them) by each location string.
    """
    served_at = {**SERVED_AT, **(declared or {})}
    expected: dict[str, dict[str, str]] = {}
    for rel, sha in files.items():
        kind, name = rel.split("/", 1)
        for location in served_at.get(kind, ()):
            expected.setdefault(location, {})[name] = sha
    return expected


def install_entrypoint(bin_dir: Path, shell: Shell) -> Path:
    """Put ``bake-entrypoint`` on ``bin_dir``: scripts/entrypoint.sh, run by ``shell``. Returns bin_dir."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "bake-entrypoint"
    argv = " ".join(f"'{a}'" for a in (*shell.argv, str(ENTRYPOINT)))
    wrapper.write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


@dataclass(frozen=True)
class PodRun:
    """One finished job: its exit code, job.py's report, and stderr."""

    returncode: int
    report: dict
    stderr: str


def run_pod(
    shell: Shell,
    *,
    bin_dir: Path,
    assets: Path,
    job_dir: Path,
    home: Path,
    expected: Mapping[str, Mapping[str, str]],
    python: str,
    runner: Path = RUNNER,
    env: Mapping[str, str] | None = None,
) -> PodRun:
    """Run ``runner`` under ``shell`` on the host, as an agent with a bare environment would."""
    home.mkdir(parents=True, exist_ok=True)
    base = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "BAKE_ASSETS": str(assets)}
    proc = subprocess.run(
        [*shell.argv, str(runner), str(job_dir), python, str(JOB), json.dumps(expected)],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return PodRun(proc.returncode, report, proc.stderr)


def sha256_files(root: Path, paths: list[str]) -> dict[str, str]:
    """Return ``{path: sha256}`` of the files at ``paths`` under ``root``."""
    return {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in paths}

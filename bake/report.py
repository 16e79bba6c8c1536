"""The JSON report that ``--json`` writes for fetch, verify, doctor and harvest --diff: one document,
versioned as pip's ``--report`` is, complete on failure too (docs/json.md; its JSON Schema is
``bake/report.schema.json``).

A command fills its part of the document as it works (``body``); whatever ends it, ``finish``
records the exit code and every error, structured: its kind, the asset, path and URL it is about,
what was expected and what was seen, and the HTTP status where there is one.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from bake import __version__
from bake.errors import Problem, UsageError
from bake.urls import redact_url

# The schema's version: a reader checks it first. A field added is no new version; a field removed
# or changed in meaning is (pip's --report rule).
VERSION = "1"
SCHEMA = Path(__file__).with_name("report.schema.json")

# Each command's part of the document, as it is before the command filled anything.
_EMPTY: dict[str, dict[str, Any]] = {
    "fetch": {"dest": None, "manifest_digest": None, "assets": []},
    "verify": {"dest": None, "against": None, "manifest_digest": None, "assets": []},
    "doctor": {"assets_root": None, "findings": [], "not_asked": []},
    "harvest --diff": {"root": None, "lacking": {"assets": [], "hub": []}, "not_pinned": []},
}
COMMANDS = tuple(_EMPTY)


def error(
    kind: str,
    message: str,
    *,
    asset: str | None = None,
    path: str | None = None,
    url: str | None = None,
    expected: str | int | None = None,
    seen: str | int | None = None,
    http_status: int | None = None,
) -> dict[str, Any]:
    """One structured error, every field present (null where it does not apply)."""
    return {
        "kind": kind,
        "message": message,
        "asset": asset,
        "path": path,
        "url": redact_url(url) if url else None,
        "expected": expected,
        "seen": seen,
        "http_status": http_status,
    }


def from_exception(
    exc: BaseException, *, asset: str | None = None, path: str | None = None, url: str | None = None
) -> dict[str, Any]:
    """The structured error of one exception: its ``kind`` and the values it carries."""
    return error(
        getattr(exc, "kind", "error"),
        str(exc),
        asset=asset,
        path=path,
        url=url,
        expected=getattr(exc, "expected", None),
        seen=getattr(exc, "seen", None),
        http_status=getattr(exc, "status", None),
    )


def from_problem(problem: Problem) -> dict[str, Any]:
    return error(
        problem.kind,
        problem.message,
        asset=problem.asset,
        path=problem.path,
        expected=problem.expected,
        seen=problem.seen,
    )


def errors_of(exc: BaseException) -> Iterator[dict[str, Any]]:
    """Every structured error an exception holds: a failed fetch holds one per source of each asset."""
    failures = getattr(exc, "failures", None)  # bake.fetch.FetchFailed: asset name -> its error
    if isinstance(failures, dict):
        for name, failure in failures.items():
            yield from _asset_errors(name, failure)
    elif getattr(exc, "problems", ()):
        yield from (from_problem(p) for p in exc.problems)
    else:
        yield from_exception(exc)


def _asset_errors(name: str, failure: BaseException) -> Iterator[dict[str, Any]]:
    tried = getattr(failure, "tried", None)  # bake.fetch.failures.SourcesFailed: each URL and its error
    if not tried:
        yield from_exception(failure, asset=name)
        return
    for url, exc in tried:
        yield from_exception(exc, asset=name, url=url)


class Report:
    """The document one command writes with ``--json REPORT`` (``-``: stdout)."""

    def __init__(self, command: str, target: str) -> None:
        self.target = target
        self.body: dict[str, Any] = json.loads(json.dumps(_EMPTY[command]))  # a fresh copy
        self.command = command
        self.errors: list[dict[str, Any]] = []

    @property
    def to_stdout(self) -> bool:
        return self.target == "-"

    def check_target(self) -> None:
        """Refuse a REPORT path that cannot be written, before the command does anything (UsageError)."""
        if self.to_stdout:
            return
        path = Path(self.target)
        parent = path.parent
        if path.is_dir():
            problem = "is a directory"
        elif not parent.is_dir():
            problem = f"its directory {str(parent)!r} does not exist"
        elif not os.access(path if path.exists() else parent, os.W_OK):
            problem = "cannot be written (permissions or a read-only filesystem)"
        else:
            return
        raise UsageError(f"--json {self.target!r}: {problem}; give a writable file path for the report")

    def failed(self, exc: BaseException) -> None:
        """Record every structured error ``exc`` holds."""
        self.errors.extend(errors_of(exc))

    def document(self, exit_code: int) -> dict[str, Any]:
        return {
            "version": VERSION,
            "bake_version": __version__,
            "command": self.command,
            "ok": exit_code == 0,
            "exit_code": exit_code,
            **self.body,
            "errors": self.errors,
        }

    def write(self, exit_code: int) -> str | None:
        """Write the document; return why it could not be written, or None."""
        text = json.dumps(self.document(exit_code), indent=2) + "\n"
        if self.to_stdout:
            sys.stdout.write(text)
            sys.stdout.flush()
            return None
        try:
            Path(self.target).write_text(text, encoding="utf-8")
        except OSError as exc:
            return f"the report could not be written ({exc.strerror or exc})"
        return None


def fetched(assets: Iterable[Any], records: Iterable[Any], failed: set[str]) -> list[dict[str, Any]]:
    """The ``assets`` of a fetch report: each selected asset that landed (a ``FetchRecord``) or failed."""
    landed = {r.name: r for r in records}
    found = []
    for asset in assets:
        r = landed.get(asset.name)
        if r is None and asset.name not in failed:
            continue  # never tried (the run was stopped)
        found.append(
            {
                "name": asset.name,
                "path": asset.path,
                "sha256": asset.sha256,
                "size": r.size if r else asset.size,
                "ok": r is not None,
                "source": r.source if r else None,
                "bytes": r.bytes if r else None,
                "seconds": round(r.seconds, 3) if r else None,
                "attempts": r.attempts if r else None,
                "cached": r.cached if r else None,
            }
        )
    return found


def body_of(rep: Report | None, **fields: Any) -> dict[str, Any]:
    """A command's part of its report, with ``fields`` set; a scratch dict when there is no report."""
    body = rep.body if rep is not None else {}
    body.update(fields)
    return body


def results_stream(rep: Report | None) -> TextIO:
    """Where a command prints its results: stdout, unless the JSON report is what goes there."""
    return sys.stderr if rep is not None and rep.to_stdout else sys.stdout

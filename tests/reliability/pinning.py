"""What the hostile Dockerfile and ``bake pin`` tests pin: one repository, its pinned reference, and a
``pin`` that returns the file's text and the error instead of raising."""

from __future__ import annotations

from pathlib import Path

from bake.errors import UsageError
from bake.pin import pin_files

REPO = "registry.example:5000/vllm-ci/bake-assets"
OLD = "sha256:" + "0" * 64
PINNED = f"{REPO}:c45ecfeac55e@sha256:{'d' * 64}"


def pin(tmp_path: Path, text: str, name: str = "Dockerfile") -> tuple[str, UsageError | None]:
    """Pin ``text`` written to a file; return the file's text afterwards and the UsageError, if any."""
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        pin_files([path], REPO, PINNED, check=False)
        error = None
    except UsageError as exc:
        error = exc
    return path.read_bytes().decode("utf-8", "surrogateescape"), error

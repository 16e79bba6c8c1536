"""The distribution reference grammar: which repository names Docker and every registry client can parse.

The expressions are distribution/reference's ``regexp.go`` (github.com/distribution/reference),
as the Docker engine and BuildKit apply them: an optional ``HOST[:PORT]/`` (domain components
of letters, digits and inner ``-``, or ``[IPv6]``), then path components of lower-case letters
and digits joined by one ``.``, one ``_``, ``__`` or any run of ``-``; at most 255 characters.
Hand-written: the grammar is these few stable expressions, and the one PyPI port
(docker-image-py) is a little-used copy of them, not worth a dependency.
"""

from __future__ import annotations

import re

NAME_MAX = 255
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = re.compile(rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

GRAMMAR = (
    "[HOST[:PORT]/]PATH, PATH being lower-case letters and digits in components joined by '/', "
    "each component's words joined by '.', '_', '__' or '-', at most 255 characters"
)


def name_problem(name: str) -> str | None:
    """Return what makes ``name`` no repository name (None for a valid one)."""
    if len(name) > NAME_MAX:
        return f"{len(name)} characters, more than {NAME_MAX}"
    if _NAME.fullmatch(name) is None:
        return f"not {GRAMMAR}"
    return None


def host_of(name: str) -> str | None:
    """Return the registry host ``name`` names itself (``HOST[:PORT]/…``), or None.

    Docker reads the first component as a host only when it holds a ``.`` or a ``:`` or is
    ``localhost``; any other name (``build/assets``, ``ubuntu``) goes to Docker Hub.
    """
    first, slash, _ = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def image_problem(ref: str) -> str | None:
    """Return what makes ``ref`` no image reference ``NAME[:TAG][@sha256:HEX]`` (None for a valid one)."""
    rest, at, digest = ref.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return f"the digest {digest!r} is not sha256: and 64 lower-case hex characters"
    name, colon, tag = rest.rpartition(":") if ":" in rest.rpartition("/")[2] else (rest, "", "")
    if colon and not _TAG.fullmatch(tag):
        return f"the tag {tag!r} is not up to 128 letters, digits, '_', '.' or '-' (not first)"
    return name_problem(name)

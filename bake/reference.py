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

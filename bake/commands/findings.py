"""What ``bake doctor`` and ``bake manifest check`` print: one verdict and one library per finding."""

from __future__ import annotations

import argparse
import logging

from bake.commands import options

log = logging.getLogger("bake")


def print_findings(args: argparse.Namespace, findings: list, not_asked: list, nothing_to_check: str) -> list:
    """Print one ``VERDICT  LIBRARY  ASSET: DETAIL`` line per finding on stdout, and on stderr each library
    that could not be asked (and ``nothing_to_check`` when there is no finding); return the bad ones.

    ``doctor`` and ``manifest check`` print their findings so: one verdict and one name per library."""
    for f in findings:
        print(f"{f.verdict}  {f.consumer}  {f.asset}: {f.detail}", file=options.out(args))
    for library, why in not_asked:
        log.warning("could not ask %s: %s", library, why)  # a diagnostic, not a result
    if not findings:
        log.warning("warning: %s; nothing was checked", nothing_to_check)
    return [f for f in findings if not f.ok]

#!/usr/bin/env python3
"""Benchmark bake side by side with its peers, and the reuse of its asset layer: the entry point.

    scripts/bench.py [--smoke] [--json OUT]        (as root; default OUT .work/bench.json)

The bench itself is the package scripts/bench/, one module per job (see scripts/bench/main.py); its
measures, their targets and its modes are one registry, scripts/bench/measures.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bake and tests come from this checkout; the bench package sits beside this file.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BenchError
from bench.main import main

if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None

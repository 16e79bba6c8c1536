"""Entry point for ``python -m bake``."""

import sys

if sys.argv[1:2] == ["seed"]:
    # bake-entrypoint's path at job start: `bake seed` without importing the rest of the CLI (110 ms).
    from bake.seed.command import main as seed

    raise SystemExit(seed(sys.argv[2:]))

from bake.cli import main

raise SystemExit(main())

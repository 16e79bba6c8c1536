"""Entry point for ``python -m bake``."""

from bake.cli import main

raise SystemExit(main())

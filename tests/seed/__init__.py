"""Unit tests of bake seed's parts, one test file per module of bake/seed/."""

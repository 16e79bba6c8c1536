"""Third-party code shipped inside bake, so the fetch stage needs nothing but the standard library.

tomli 2.5.0 (MIT, see tomli/LICENSE), unmodified: the TOML reader for Python 3.10,
which has no tomllib. Python 3.11+ uses the standard library's tomllib instead.
"""

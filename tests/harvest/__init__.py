"""One test file per module of bake/harvest/: reading caches, planning entries, --diff and the command."""

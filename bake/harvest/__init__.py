"""``bake harvest``: from the caches one real job filled to the manifest entries that pin what it read.

``caches`` reads the caches offline (the Hub's through ``bake.hub.scan``); ``pin`` plans the
entries against a manifest and writes them the way ``bake add`` does; ``diff`` compares them
with a sealed asset root; ``command`` is the CLI's side. docs/harvest.md is the user's guide.
"""

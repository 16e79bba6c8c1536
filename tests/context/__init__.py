"""One test file per module of bake/context/: the check, .dockerignore, the export and running git."""

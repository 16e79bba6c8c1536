"""One test file per command module of bake/commands/: its parser, its handler and its exit codes."""

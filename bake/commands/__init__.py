"""The commands without a package of their own, one module each: its parser, its handler, its exit codes.

Every command module (these, ``bake.harvest.command`` and ``bake.seed.command``) exposes the same small
interface, which ``bake.cli`` assembles and ``tests/test_structure.py`` checks:

- ``NAME``: the word on the command line;
- ``EXIT_CODES``: the contract's exit codes it may return (its ``--help`` and README.md's table say them);
- ``ENVIRONMENT``: the variables it reads, named in its ``--help`` (``bake.usage.VARIABLES``);
- ``add_parser(sub)``: adds its sub-parser, with ``run`` set to its handler, which returns the exit code.

Options that several commands share, and what they turn into, are in ``bake.commands.options``.
"""

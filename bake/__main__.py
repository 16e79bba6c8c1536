"""Entry point for ``python -m bake`` and the installed ``bake`` command."""

import sys


def main() -> int:
    """Run one command; ``bake seed``, which bake-entrypoint runs at job start, without loading the
    rest of the CLI (110 ms of imports: the fetch engine, the manifest, the index). Its ``--help`` is
    the CLI's, which names the variables and exit codes as every command's does."""
    if sys.argv[1:2] == ["seed"] and not {"-h", "--help"} & set(sys.argv[2:]):
        from bake.seed.command import main as seed

        return seed(sys.argv[2:])
    from bake.cli import main as cli

    return cli()


if __name__ == "__main__":
    raise SystemExit(main())

"""Image assertions for any image that carries bake's asset layer: a pytest plugin.

Run the standard assertions against an image with::

    pip install 'bake-assets[testinfra]'
    pytest --pyargs bake.testing --bake-image IMAGE [--bake-secret-pattern P]…

or, inside a job whose runner bypasses the ENTRYPOINT (a native pod), after the runner's line
``bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"``, on the running system::

    pytest --pyargs bake.testing --bake-local        (or BAKE_LOCAL=1)

The plugin (``bake.testing.plugin``, registered through the ``pytest11`` entry point) also
offers public fixtures for checks of your own: ``bake_system`` (the image, or the running
system), ``bake_image``, ``bake_image_attrs``,
``bake_host`` (a testinfra host on a ``--network none`` container of the image),
``bake_lock`` (the parsed ``bake.lock.json``) and ``bake_run`` (runs a command through the
image's ENTRYPOINT, offline). Nothing here imports docker or testinfra until a fixture needs
them, so installing bake without the extra never breaks another project's pytest run.
"""

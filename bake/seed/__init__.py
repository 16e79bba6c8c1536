"""Seeding node storage at job start (``bake seed``): verified copies of a consumer's baked files.

``bake-entrypoint`` calls it where a node-storage location (a volume, a persistent cache shared
by jobs of many images) is not already proved served by its stamp. The protocol, in one place
(docs/runtime.md's state table):

- ``nodefs``: node storage reached by directory descriptors, never through a link;
- ``plan``: what the location holds against the consumer's ``bake.serve`` records;
- ``liveness``: a copier's heartbeat (a thread of its own process) and a judge's watch of the
  partials, on the judge's own monotonic clock;
- ``right``: the right to copy, flock where it works, an exclusive mkdir where it fails;
- ``copier``: the copy, hashed as it is written, installed by hard links that never replace;
- ``stamp``: the stamp the entrypoint checks on later starts;
- ``seeder``: who copies, who waits, who takes over, each wait bounded;
- ``view``, ``checks``: a job-local view of a re-pointed variable's directory, BAKE_VERIFY's hashing;
- ``command``: the command line, its one result line and its exit codes.
"""

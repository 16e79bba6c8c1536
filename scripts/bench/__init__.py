"""scripts/bench.py split by job: processes, fetchers, engine, builds, entrypoint, report, main."""

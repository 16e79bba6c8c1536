#!/bin/sh
# `bake` inside the image: verify and doctor for jobs, and the `bake seed` bake-entrypoint runs, from
# the copy in /opt/bake/lib. The entrypoint may run with a PATH of its own (busybox applets only):
# then the image's python3 is found where images keep it.
PYTHONPATH="/opt/bake/lib${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
for python in python3 /usr/bin/python3 /usr/local/bin/python3; do
	if command -v "$python" >/dev/null 2>&1; then exec "$python" -m bake "$@"; fi
done
echo "bake: error: no python3 on PATH, nor in /usr/bin or /usr/local/bin; bake needs Python 3.10 or later" >&2
exit 127

#!/bin/sh
# `bake` inside the image: verify and doctor for jobs, from the copy in /opt/bake/lib.
PYTHONPATH="/opt/bake/lib${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m bake "$@"

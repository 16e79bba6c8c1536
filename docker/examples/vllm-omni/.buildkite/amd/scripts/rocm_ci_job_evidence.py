"""A stand-in for vLLM-Omni's job-evidence supervisor, written for bake's tests (none of its code).

The fact bake depends on: ``run`` runs the step's commands as a child that inherits the runner's
environment, after bake's line has served and exported it. ``begin`` and ``finish`` record the
job's start and exit code in the evidence directory.
"""

import argparse
import json
import os
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=("begin", "run", "finish"))
    parser.add_argument("--directory", required=True)
    parser.add_argument("--commands")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    record = os.path.join(args.directory, "job-result.json")
    if args.action == "begin":
        with open(record, "w", encoding="utf-8") as out:
            json.dump({"state": "running"}, out)
        return 0
    if args.action == "finish":
        with open(record, "w", encoding="utf-8") as out:
            json.dump({"state": "finished", "exit_code": args.exit_code}, out)
        return 0
    sys.stdout.flush()
    return subprocess.run(["/bin/bash", "-o", "pipefail", "-c", args.commands], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())

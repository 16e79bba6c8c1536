"""A job as a runner starts it: does every consumer location serve the baked files?

    python3 job.py EXPECTED_JSON

EXPECTED_JSON maps each location to ``{file name: sha256}``. A built-in consumer's location
(``s3tokenizer``, ``tiktoken-rs``, ``tiktoken``) is resolved the way that library resolves it;
a declared consumer's is its manifest string, ``$VAR`` or ``${VAR:-DEFAULT}/SUB``, resolved
as a shell would. Never through bake. Prints one JSON report
(locations, what each file there hashes to, the environment) and exits 0 when every expected
file is served with its bytes, 1 otherwise, naming each problem on stderr. Standard library
only, so it runs on any host and in any image with python3.
"""

import hashlib
import json
import os
import re
import sys
import tempfile


def s3tokenizer():
    # s3tokenizer.load_model: $XDG_CACHE_HOME/s3tokenizer, else ~/.cache/s3tokenizer.
    default = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.getenv("XDG_CACHE_HOME", default), "s3tokenizer")


def tiktoken_rs():
    # openai-harmony (tiktoken-rs): $TIKTOKEN_RS_CACHE_DIR, else <tempdir>/tiktoken-rs-cache.
    return os.environ.get("TIKTOKEN_RS_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "tiktoken-rs-cache")


def tiktoken():
    # tiktoken: $TIKTOKEN_CACHE_DIR, else $DATA_GYM_CACHE_DIR, else <tempdir>/data-gym-cache.
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    return os.environ.get("DATA_GYM_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "data-gym-cache")


LOCATIONS = {"s3tokenizer": s3tokenizer, "tiktoken-rs": tiktoken_rs, "tiktoken": tiktoken}


def declared(text):
    """Resolve ``$VAR`` or ``${VAR:-DEFAULT}/SUB`` as sh would (DEFAULT may start with $HOME)."""
    export = re.fullmatch(r"\$(\w+)", text)
    if export:
        return os.environ.get(export.group(1)) or f"<{export.group(1)} unset>"
    var, default, sub = re.fullmatch(r"\$\{(\w+):-([^}]*)\}(?:/(.*))?", text).groups()
    base = os.environ.get(var) or default.replace("$HOME", os.path.expanduser("~"), 1)
    return os.path.join(base, sub or "")


def digest(path):
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def main():
    expected = json.loads(sys.argv[1])
    report = {"locations": {}, "env": {k: v for k, v in os.environ.items() if k != "PATH"}}
    problems = []
    for location, files in expected.items():
        where = os.path.abspath(LOCATIONS[location]() if location in LOCATIONS else declared(location))
        seen = {name: digest(os.path.join(where, name)) for name in files}
        report["locations"][location] = {"path": where, "files": seen}
        problems += [
            f"job: {location}: {os.path.join(where, name)}: expected sha256 {sha}, saw {seen[name]}"
            for name, sha in files.items()
            if seen[name] != sha
        ]
    print(json.dumps(report))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

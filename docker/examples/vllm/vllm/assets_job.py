"""A stand-in for a vLLM test job: read the baked files where the consumer libraries look, offline.

Prints one JSON object, {lookup path: sha256 or null}: s3tokenizer's
``${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer``, openai-harmony's ``$TIKTOKEN_RS_CACHE_DIR``
and tiktoken's ``$TIKTOKEN_CACHE_DIR``, as those libraries resolve them.
"""

import hashlib
import json
import os


def _digest(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def main():
    home_cache = os.path.join(os.path.expanduser("~"), ".cache")
    places = {
        "s3tokenizer": os.path.join(os.environ.get("XDG_CACHE_HOME") or home_cache, "s3tokenizer"),
        "TIKTOKEN_RS_CACHE_DIR": os.environ.get("TIKTOKEN_RS_CACHE_DIR", ""),
        "TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR", ""),
    }
    found = {}
    for consumer, place in places.items():
        names = sorted(os.listdir(place)) if place and os.path.isdir(place) else []
        found[consumer] = {name: _digest(os.path.join(place, name)) for name in names}
    print(json.dumps({"vllm": __import__("vllm").__version__, "found": found}))


if __name__ == "__main__":
    main()

#!/bin/sh
# Create .venv with bake and everything its tests use. Idempotent; as root on a
# fresh Debian machine it installs python3-venv first if it is missing.
set -eu
cd "$(dirname "$0")/.."

if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  apt-get update -q && apt-get install -y -q python3-venv
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,bench]'  # bench: the scale plot's matplotlib
# s3tokenizer's declared dependencies pull multi-GB torch wheels; the tests need
# only its loader code and tables, so it is installed without them.
.venv/bin/python -m pip install -q --no-deps 's3tokenizer==0.3.0'

#!/usr/bin/env bash
# The whole test suite, image tests included. As root on a fresh Debian 12/13
# machine it installs and starts everything it needs, and stops what it started.
#   scripts/test.sh [PYTEST ARGS…]
# BAKE_KEEP_TOOLCHAIN=1 leaves dockerd and the registry running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$repo/.work
mkdir -p "$work"

echo "== python environment"
scripts/setup-python.sh
# shellcheck source=/dev/null
. .venv/bin/activate

echo "== lint"
ruff check .
ruff format --check .
# Ubuntu 22.04 ROCm images run bake verify/doctor on Python 3.10.
vermin --no-tips --violations --eval-annotations -t=3.10- --exclude-regex '^bake/_vendor/' bake scripts tests
shellcheck scripts/*.sh docker/*.sh docker/examples/vllm/.buildkite/scripts/*.sh \
  docker/examples/vllm-omni/.buildkite/amd/scripts/*.sh tests/pod/*.sh .ci/run
hadolint docker/Dockerfile tests/image/*.Dockerfile
# DL3067 flags `COPY --from=IMAGE / /`, which is how vLLM's ci_base takes bake's FROM scratch images whole.
hadolint --ignore DL3067 docker/examples/vllm/docker/Dockerfile.rocm docker/examples/vllm-omni/docker/Dockerfile.rocm

echo "== every command's --help (the list comes from the parser; tests/test_usage.py checks the text)"
python -c 'from bake import usage; from bake.cli import build_parser
for words, _ in usage.parsers(build_parser()): print(" ".join(words))' |
  while read -r words; do
    # shellcheck disable=SC2086 # $words is the command's words
    python -m bake $words --help >/dev/null || { echo >&2 "test.sh: bake $words --help failed"; exit 1; }
    echo "ok: bake${words:+ $words} --help"
  done

echo "== docker toolchain"
toolchain_was_up=0
if scripts/toolchain.sh status >/dev/null 2>&1; then toolchain_was_up=1; fi
scripts/toolchain.sh up
eval "$(scripts/toolchain.sh env)"

mirror_pid=""
cleanup() {
  status=$?
  if [ -n "$mirror_pid" ]; then kill "$mirror_pid" 2>/dev/null || true; wait "$mirror_pid" 2>/dev/null || true; fi
  if [ "$toolchain_was_up" = 0 ] && [ "${BAKE_KEEP_TOOLCHAIN:-0}" != 1 ]; then scripts/toolchain.sh down || true; fi
  exit "$status"
}
trap cleanup EXIT

echo "== test assets and loopback mirror"
python -m tests.assets "$work/mirror" --npm-dir "$work/npm"
rm -f "$work/mirror.port"
python -m tests.mirror --root "$work/mirror" --port-file "$work/mirror.port" &
mirror_pid=$!
for _ in $(seq 100); do [ -s "$work/mirror.port" ] && break; sleep 0.1; done
[ -s "$work/mirror.port" ] || { echo >&2 "test.sh: the loopback mirror did not start (pid $mirror_pid)"; exit 1; }
BAKE_TEST_MIRROR="http://127.0.0.1:$(cat "$work/mirror.port")"
export BAKE_TEST_MIRROR

echo "== build the image under test"
ASSET_MIRRORS=$(python -c 'import sys; from tests.assets import mirror_args; print(" ".join(mirror_args(sys.argv[1])))' "$BAKE_TEST_MIRROR")
ASSET_DIGEST=$(python -m bake manifest digest --manifest tests/image/assets.toml)
# A dummy token, passed the way a real Hub token is; tests prove it never reaches a layer.
BAKE_TEST_HF_TOKEN="hf_bake_test_$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
export ASSET_MIRRORS ASSET_DIGEST BAKE_TEST_HF_TOKEN
# IMAGE_TAG (default local) lets two checkouts on one engine test their own images.
: "${IMAGE_TAG:=local}"
export IMAGE_TAG
docker buildx bake -f docker-bake.hcl -f docker/bake-test.hcl --allow=network.host image
export BAKE_TEST_IMAGE="bake/rocm-test:$IMAGE_TAG"

echo "== pytest"
python -m pytest "$@"   # no arguments: every test under tests/ (pyproject testpaths)

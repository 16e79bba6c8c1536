#!/usr/bin/env bash
# Build the production image: the real ROCm base and the real asset URLs.
#   scripts/build.sh [BAKE ARGS…]     e.g. scripts/build.sh --set image.tags=me/rocm:dev
# As root on a fresh Debian 12/13 machine it installs the Docker toolchain and
# bake first. ASSET_MANIFEST, ASSET_GROUPS and ASSET_MIRRORS are honoured.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-python.sh
scripts/toolchain.sh up
# shellcheck source=/dev/null
. .venv/bin/activate

groups=()
for group in ${ASSET_GROUPS:-}; do groups+=(--group "$group"); done
ASSET_DIGEST=$(bake manifest digest --manifest "${ASSET_MANIFEST:-docker/assets.toml}" "${groups[@]}")
export ASSET_DIGEST
# check-context first (exit 1 on real source changes, 4 if git cannot answer), then bake.
exec bake build -- "$@"

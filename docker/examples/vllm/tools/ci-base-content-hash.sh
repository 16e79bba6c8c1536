#!/bin/sh
# Stand-in for the content hash vLLM's CI computes over the files that decide ci_base.
# The ensure-ci-base step compares it with the label on the published ci_base and
# rebuilds ci_base only when they differ:
#   CI_BASE_CONTENT_HASH=$(tools/ci-base-content-hash.sh) docker buildx bake ... ci-base-rocm-ci
set -eu
cd "$(dirname "$0")/.."
cat docker/Dockerfile.rocm requirements/rocm.txt | sha256sum | cut -c1-64

#!/bin/bash
# A stand-in for vLLM-Omni's .buildkite/amd/scripts/run-amd-test.sh, written for bake's tests
# from what docs/vllm-omni.md says of it (none of vLLM-Omni's code is in it): it runs in the
# MI300 pod, inside the test image, whose ENTRYPOINT the pod replaced; it makes the job's own
# cache directories, then runs the step's commands. The line marked "bake:" is what it gains.
#
#   TEST_COMMANDS='…' run-amd-test.sh      (or the commands as arguments)
set -euo pipefail

: "${HF_HOME:=/home/buildkite-agent/huggingface}"
export HF_HOME

if [[ "${VLLM_CI_DOCKER_DISABLED:-0}" != "1" ]]; then
	echo "Error: MI300 CI must run natively with Docker disabled." >&2
	exit 1
fi
commands="${TEST_COMMANDS:-$*}"
if [[ -z "${commands}" ]]; then
	echo "Error: No test commands provided." >&2
	exit 1
fi

job_id="${BUILDKITE_JOB_ID:-${BUILDKITE_PARALLEL_JOB:-local}}"
job_id="${job_id//[^A-Za-z0-9_.-]/_}"
native_cache_root="/tmp/vllm-omni-native-${job_id}"
TMPDIR="${native_cache_root}/tmp"
TORCHINDUCTOR_CACHE_DIR="${native_cache_root}/torchinductor"
TRITON_CACHE_DIR="${native_cache_root}/triton"
VLLM_CACHE_ROOT="${native_cache_root}/vllm"
XDG_CACHE_HOME="${native_cache_root}/xdg"
HF_DATASETS_CACHE="${native_cache_root}/huggingface/datasets"
export TMPDIR TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR VLLM_CACHE_ROOT XDG_CACHE_HOME HF_DATASETS_CACHE
mkdir -p "${TMPDIR}" "${TORCHINDUCTOR_CACHE_DIR}" "${TRITON_CACHE_DIR}" \
	"${VLLM_CACHE_ROOT}" "${XDG_CACHE_HOME}" "${HF_HOME}" "${HF_DATASETS_CACHE}"
# bake: serve the baked assets for the environment just set (docs/vllm-omni.md)
bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"

echo "Commands: ${commands}"
/bin/bash -o pipefail -c "${commands}"

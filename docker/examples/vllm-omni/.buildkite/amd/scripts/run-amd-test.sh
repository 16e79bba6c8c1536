#!/bin/bash
# A stand-in for vLLM-Omni's .buildkite/amd/scripts/run-amd-test.sh, written for bake's tests
# from that runner's facts (none of vLLM-Omni's code is in it). It follows the newest version the
# search tools hold: the one with the job-evidence supervisor (VLLM_CI_JOB_EVIDENCE) and
# VLLM_CI_ALLOW_NO_TESTS, 5,492 characters (the tools name no commit for it; the one commit they
# list, 71ab08ae, is the older version without either). It runs in the MI300 pod, inside the test
# image, whose ENTRYPOINT the pod replaced: the same defaults and exports, the supervisor's begin
# and EXIT trap, the job's cache directories under /tmp/vllm-omni-native-<job id> made by one
# mkdir -p, the persistent-HF_HOME check by findmnt, then the step's commands, each one's failure
# kept (a bash ERR trap) or, under the supervisor, run by it with the runner's environment.
# Left out: the SPDX header, and rocminfo and the torch GPU check (no GPU here). The line marked
# "bake:" is what the runner gains.
#
#   TEST_COMMANDS='…' run-amd-test.sh      (or the commands as arguments)
set -euo pipefail

: "${PYTHONFAULTHANDLER:=1}"
: "${HF_HOME:=/home/buildkite-agent/huggingface}"
: "${HF_HUB_DOWNLOAD_TIMEOUT:=300}"
: "${HF_HUB_ETAG_TIMEOUT:=60}"
: "${MIOPEN_DEBUG_CONV_DIRECT:=0}"
: "${MIOPEN_DEBUG_CONV_GEMM:=0}"
: "${VLLM_ROCM_USE_AITER:=0}"
export PYTHONFAULTHANDLER HF_HOME HF_HUB_DOWNLOAD_TIMEOUT HF_HUB_ETAG_TIMEOUT
export MIOPEN_DEBUG_CONV_DIRECT MIOPEN_DEBUG_CONV_GEMM VLLM_ROCM_USE_AITER
export PYTORCH_ROCM_ARCH=""
export PYTHONPATH="${PYTHONPATH:-..}"

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
if [[ "${VLLM_CI_JOB_EVIDENCE:-0}" == "1" ]]; then
	ROCM_CI_JOB_EVIDENCE_DIR="${BUILDKITE_BUILD_CHECKOUT_PATH:-${PWD}}/artifacts/rocm-job"
	export ROCM_CI_JOB_EVIDENCE_DIR
	export PYTHONPATH="${script_dir}:${PYTHONPATH}"
	mkdir -p "${ROCM_CI_JOB_EVIDENCE_DIR}"
	# shellcheck disable=SC2329 # invoked by the EXIT trap
	finalize_job_evidence() {
		local status=$1
		trap - EXIT
		python3 "${script_dir}/rocm_ci_job_evidence.py" finish \
			--directory "${ROCM_CI_JOB_EVIDENCE_DIR}" --exit-code "${status}" || :
		exit "${status}"
	}
	trap 'finalize_job_evidence "$?"' EXIT
	python3 "${script_dir}/rocm_ci_job_evidence.py" begin --directory "${ROCM_CI_JOB_EVIDENCE_DIR}"
fi

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
export TMPDIR TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR VLLM_CACHE_ROOT
export XDG_CACHE_HOME HF_DATASETS_CACHE
mkdir -p "${TMPDIR}" "${TORCHINDUCTOR_CACHE_DIR}" "${TRITON_CACHE_DIR}" \
	"${VLLM_CACHE_ROOT}" "${XDG_CACHE_HOME}" "${HF_HOME}" \
	"${HF_DATASETS_CACHE}"
# bake: serve the baked assets for the environment just set (docs/vllm-omni.md)
bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"

if [[ "${VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE:-0}" == "1" ]]; then
	hf_mount=$(findmnt -n -T "${HF_HOME}" -o TARGET 2>/dev/null || true)
	if [[ -z "${hf_mount}" || "${hf_mount}" == "/" ]]; then
		echo "Error: MI300 CI requires a persistent volume at or above ${HF_HOME}." >&2
		exit 1
	fi
fi

echo "Commands: ${commands}"
if [[ "${VLLM_CI_JOB_EVIDENCE:-0}" == "1" ]]; then
	if python3 "${script_dir}/rocm_ci_job_evidence.py" run \
		--directory "${ROCM_CI_JOB_EVIDENCE_DIR}" --commands "${commands}"; then
		exit 0
	else
		exit_code=$?
	fi
elif /bin/bash -o pipefail -c '
set -E
test_status=0
trap '\''command_status=$?; if (( test_status == 0 || (test_status == 5 && command_status != 5) )); then test_status=${command_status}; fi'\'' ERR
eval "$1"
exit "${test_status}"
' _ "${commands}"; then
	exit 0
else
	exit_code=$?
fi

if [[ ${exit_code} -eq 5 && "${VLLM_CI_ALLOW_NO_TESTS:-0}" == "1" ]]; then
	echo "Pytest collected no tests; VLLM_CI_ALLOW_NO_TESTS=1, treating exit code 5 as success."
	exit 0
fi
exit "${exit_code}"

#!/bin/bash
# A stand-in for vLLM's AMD runner on a native MI300 pod (run-amd-test.sh, its native branch),
# written from the runner's facts, not its code: as root, `set -o pipefail` and no -e or -u;
# initialize_native_environment's variables in its order, exported and made with one mkdir -p,
# the persistent-volume check by findmnt, hf-xet kept job-local only where HF_HOME is NFS;
# bake's line right after it returns; the CI variables unset; then the job under
# `bash -o pipefail -c`. It follows the newest runner the search tools hold (vllm-project/vllm
# .buildkite/scripts/hardware_ci/run-amd-test.sh, the stored version of 58,017 characters whose
# docker path runs rocm/vllm-ci:build-${BUILDKITE_BUILD_ID}; the tools name no commit for it).
# Left out: the DPX GPU lock, the workspace staged from /opt/vllm-ci/workspace (the stand-in image
# has none) and the preflight, which run after bake's line and read none of its locations.
#   vllm-native.sh COMMANDS
# BUILDKITE_JOB_ID names the job; HF_HOME, when set, is the pod's persistent Hub cache volume.
set -o pipefail
commands=$1

initialize_native_environment() {
	local job_id="${BUILDKITE_JOB_ID:-${BUILDKITE_PARALLEL_JOB:-local}}" suffix native_root hf_mount hf_fstype=""
	if [[ "$(id -u)" -ne 0 ]]; then
		echo "the native runner needs root" >&2
		return 1
	fi
	job_id="${job_id//[^A-Za-z0-9_.-]/_}"
	suffix="${job_id##*-}"
	suffix="${suffix:0:12}"
	native_root="/tmp/vllm-native-${job_id}"
	TMPDIR="/tmp/vllm-${suffix}/tmp"
	VLLM_RPC_BASE_PATH=/tmp
	TORCHINDUCTOR_CACHE_DIR="${native_root}/cache/torchinductor"
	TRITON_CACHE_DIR="${native_root}/cache/triton"
	VLLM_CACHE_ROOT="${native_root}/cache/vllm"
	XDG_CACHE_HOME="${native_root}/cache/xdg"
	: "${HF_HOME:=/home/buildkite-agent/huggingface}"
	HF_DATASETS_CACHE="${native_root}/cache/huggingface/datasets" # datasets' POSIX locks fail on the NFS cache
	TIKTOKEN_RS_CACHE_DIR="${HF_HOME}/tiktoken-rs-cache"
	: "${HF_HUB_DOWNLOAD_TIMEOUT:=300}"
	: "${HF_HUB_ETAG_TIMEOUT:=60}"
	if [[ "${VLLM_CI_EXPECTED_GPU_COUNT:-1}" == 0 ]]; then
		VLLM_TARGET_DEVICE=cpu
		export VLLM_TARGET_DEVICE
	fi
	export TMPDIR VLLM_RPC_BASE_PATH TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR VLLM_CACHE_ROOT XDG_CACHE_HOME
	export HF_HOME HF_DATASETS_CACHE HF_HUB_DOWNLOAD_TIMEOUT HF_HUB_ETAG_TIMEOUT TIKTOKEN_RS_CACHE_DIR
	export PYTORCH_ROCM_ARCH=""
	mkdir -p "$TMPDIR" "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR" "$VLLM_CACHE_ROOT" "$XDG_CACHE_HOME" \
		"$HF_HOME" "$TIKTOKEN_RS_CACHE_DIR" "$HF_DATASETS_CACHE" || return 1
	if [[ "${VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE:-0}" == 1 ]]; then
		hf_mount=$(findmnt -n -T "$HF_HOME" -o TARGET 2>/dev/null || true)
		if [[ -z "$hf_mount" || "$hf_mount" == / ]]; then
			echo "a persistent volume must be mounted at or above $HF_HOME" >&2
			return 1
		fi
	fi
	hf_fstype=$(findmnt -n -T "$HF_HOME" -o FSTYPE 2>/dev/null || true)
	if [[ "$hf_fstype" == nfs || "$hf_fstype" == nfs4 ]]; then
		export HF_XET_CACHE="${native_root}/cache/hf-xet" HF_XET_HIGH_PERFORMANCE=0
		mkdir -p "$HF_XET_CACHE" || return 1
	fi
}

if ! initialize_native_environment; then
	echo "Failed to initialize the native test environment"
	exit 1
fi
# bake: serve the baked assets where this job's libraries look. Right after the line above.
bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"

# clear_ci_orchestration_env: the runner's own variables never reach the job.
for var in $(compgen -e); do
	[[ $var == VLLM_CI_* ]] && unset "$var"
done
/bin/bash -o pipefail -c "$commands"

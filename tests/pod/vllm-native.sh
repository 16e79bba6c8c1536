#!/bin/bash
# A stand-in for vLLM's AMD runner on a native MI300 pod (run-amd-test.sh, its native branch),
# written from the runner's facts, not its code: as root, `set -o pipefail` and no -e or -u;
# initialize_native_environment's variables in its order, exported and made with one mkdir -p;
# bake's line right after it returns; a job-local HF_XET_CACHE; the CI variables unset; then the
# job under `bash -o pipefail -c`.
#   vllm-native.sh COMMANDS
# BUILDKITE_JOB_ID names the job; HF_HOME, when set, is the pod's persistent Hub cache volume.
set -o pipefail
commands=$1

initialize_native_environment() {
	local job_id="${BUILDKITE_JOB_ID:-local}" suffix native_root
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
	export TMPDIR VLLM_RPC_BASE_PATH TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR VLLM_CACHE_ROOT XDG_CACHE_HOME
	export HF_HOME HF_DATASETS_CACHE HF_HUB_DOWNLOAD_TIMEOUT HF_HUB_ETAG_TIMEOUT TIKTOKEN_RS_CACHE_DIR
	export PYTORCH_ROCM_ARCH=""
	mkdir -p "$TMPDIR" "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR" "$VLLM_CACHE_ROOT" "$XDG_CACHE_HOME" \
		"$HF_HOME" "$TIKTOKEN_RS_CACHE_DIR" "$HF_DATASETS_CACHE" || return 1
	if [[ "${VLLM_CI_REQUIRE_PERSISTENT_HF_CACHE:-0}" == 1 ]]; then
		if [[ "$(stat -c %d "$HF_HOME")" == "$(stat -c %d /)" ]]; then
			echo "a persistent volume must be mounted at or above $HF_HOME" >&2
			return 1
		fi
	fi
}

if ! initialize_native_environment; then
	echo "Failed to initialize the native test environment"
	exit 1
fi
# bake: serve the baked assets where this job's libraries look. Right after the line above.
bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"

export HF_XET_CACHE="/tmp/vllm-native-${BUILDKITE_JOB_ID:-local}/cache/hf-xet"
mkdir -p "$HF_XET_CACHE" || exit 1
# clear_ci_orchestration_env: the runner's own variables never reach the job.
for var in $(compgen -e); do
	[[ $var == VLLM_CI_* ]] && unset "$var"
done
/bin/bash -o pipefail -c "$commands"

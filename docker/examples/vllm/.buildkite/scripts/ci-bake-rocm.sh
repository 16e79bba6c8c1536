#!/usr/bin/env bash
# A stand-in for vLLM's .buildkite/scripts/ci-bake-rocm.sh, written for bake's tests (none of
# vLLM's code is in it). It follows the newest wrapper the search tools hold: the stored version
# of 97,056 characters whose ci_base stages include lmcache_source and build_lmcache (the tools
# name no commit for it; an older stored version, 101,398 characters, also hashed both Docker
# Bake files, and this one no longer does). Like vLLM's wrapper, CI runs every ROCm build through
# it, with its own -f files and no hook for anyone else's, and it decides whether ci_base must be
# rebuilt. It hashes three things:
#   1. the files in CI_BASE_CONTENT_FILES (path, executable bit, contents; a file the checkout
#      lacks as "missing"); no Docker Bake file is among them;
#   2. the text of the Dockerfile stages in CI_BASE_DOCKERFILE_STAGES, and no line before the
#      Dockerfile's first FROM;
#   3. the resolved value of each ARG those stages use that is declared there or before the
#      first FROM (the environment's, else the Dockerfile's default);
# and builds ci_base only when the result differs from the vllm.ci_base.content_hash label of
# the published image (CI_BASE_IMAGE_TAG), read from the registry. bake's lines in the ci_base
# stage carry digest pins, so `bake pin` alone moves the hash; bake needs nothing from here.
#
# In Buildkite (BUILDKITE=true), as vLLM's wrapper does, the build context is HEAD's git tree,
# exported to a directory of the wrapper's own, and the hash is taken there: a tracked change
# that is not committed (an uncommitted `bake pin`) or a staged one stops the build. So does an
# untracked file, where vLLM's wrapper leaves it out of the context without a word: the
# stand-in is stricter, so that a test catches the file a build would silently lack.
#
#   ci-bake-rocm.sh TARGET                       build TARGET (ci-base-rocm*: only when stale)
#   BAKE_PRINT_ONLY=1 ci-bake-rocm.sh TARGET     print the resolved definition, build nothing
set -euo pipefail

: "${CI_BASE_CONTENT_FILES:=.dockerignore requirements/common.txt requirements/rocm.txt requirements/test/rocm.txt tools/install_torchcodec_rocm.sh rust-toolchain.toml tests/vllm_test_utils}"
: "${CI_BASE_DOCKERFILE:=docker/Dockerfile.rocm}"
: "${CI_BASE_DOCKERFILE_STAGES:=base rust_toolchain_input_0 rust-toolchain-input rust-toolchain build_nixl lmcache_source build_lmcache build_rocshmem build_deepep mori_base ci_base}"
: "${CI_BASE_IMAGE_TAG:=rocm/vllm-dev:ci_base}"
HASH_LABEL=vllm.ci_base.content_hash
WORK_DIR=

# One content file: its path, whether it is executable, and its sha256 (a link: its target).
_hash_file() {
	local path=$1 mode=644
	if [ -L "$path" ]; then
		printf 'link:%s -> %s\n' "$path" "$(readlink "$path")"
		return
	fi
	if [ -x "$path" ]; then mode=755; fi
	printf 'file:%s mode:%s sha256:%s\n' "$path" "$mode" "$(sha256sum <"$path" | cut -d' ' -f1)"
}

# Every file CI_BASE_CONTENT_FILES names, directories walked in a fixed order.
_content_files() {
	local path file
	for path in $CI_BASE_CONTENT_FILES; do
		if [ -d "$path" ] && [ ! -L "$path" ]; then
			while IFS= read -r -d '' file; do
				_hash_file "$file"
			done < <(find "$path" \( -type f -o -type l \) -print0 | LC_ALL=C sort -z)
		elif [ -e "$path" ] || [ -L "$path" ]; then
			_hash_file "$path"
		else
			printf 'missing:%s\n' "$path"
		fi
	done
}

# Every line of the stages CI_BASE_DOCKERFILE_STAGES names; with $1 = global, also the lines
# before the first FROM (where global ARGs are declared).
_stage_lines() {
	awk -v stages="$CI_BASE_DOCKERFILE_STAGES" -v keep="$([ "${1:-}" = global ] && echo 1 || echo 0)" '
		BEGIN { n = split(stages, names, " "); for (i = 1; i <= n; i++) wanted[names[i]] = 1 }
		toupper($1) == "FROM" {
			keep = 0
			for (i = 2; i < NF; i++) if (toupper($i) == "AS") keep = ($(i + 1) in wanted)
		}
		keep
	' "$CI_BASE_DOCKERFILE"
}

# The ARGs declared before the first FROM or in those stages, and used there ($NAME or ${NAME…}),
# once each, in order.
_stage_args() {
	local lines name
	lines=$(_stage_lines global)
	while IFS= read -r name; do
		if grep -q -E '\$\{?'"$name"'([^A-Za-z0-9_]|$)' <<<"$lines"; then
			printf '%s\n' "$name"
		fi
	done < <(sed -n -E 's/^[[:space:]]*ARG[[:space:]]+([A-Za-z_][A-Za-z0-9_]*).*/\1/p' <<<"$lines" | awk '!seen[$0]++')
}

# ARG NAME's value for this build: the environment's, else the Dockerfile's first default.
_arg_value() {
	local name=$1
	if [ -n "${!name:-}" ]; then
		printf '%s' "${!name}"
		return
	fi
	sed -n -E 's/^[[:space:]]*ARG[[:space:]]+'"$name"'="?([^"[:space:]]*)"?.*/\1/p' "$CI_BASE_DOCKERFILE" | head -n 1
}

_ci_base_hash() {
	local name
	{
		printf 'content-files:%s\n' "$(_content_files | sha256sum | cut -d' ' -f1)"
		printf 'dockerfile:%s stages:%s\n' "$CI_BASE_DOCKERFILE" "$CI_BASE_DOCKERFILE_STAGES"
		for name in $(_stage_args); do
			printf 'arg:%s=%s\n' "$name" "$(_arg_value "$name")"
		done
		_stage_lines
	} | sha256sum | cut -d' ' -f1
}

# The content-hash label of the published ci_base; empty when there is no image (or no answer).
_remote_hash() {
	docker buildx imagetools inspect "$CI_BASE_IMAGE_TAG" \
		--format "{{index .Image.Config.Labels \"$HASH_LABEL\"}}" 2>/dev/null || true
}

# Fail, naming what git reports ($2) and what to do, when it reports anything.
_refuse() {
	local what=$1 listing=$2
	[ -z "$listing" ] && return 0
	printf >&2 'ci-bake-rocm.sh: %s, which the build context (the git tree of HEAD) would lack:\n%s\n' "$what" "$listing"
	echo >&2 "Commit them (a \`bake pin\` too: git add docker/Dockerfile.rocm && git commit), or remove them, then run again."
	exit 1
}

# The build context in Buildkite: HEAD's tree, exported to WORK_DIR/context, refusing what it would
# lack; WORK_DIR/context.hcl points _common-rocm at it.
_git_context() {
	local context=$WORK_DIR/context prefix
	git rev-parse --verify -q HEAD >/dev/null || {
		echo >&2 "ci-bake-rocm.sh: $(pwd) is no git checkout with a commit; CI builds from HEAD's tree"
		exit 1
	}
	# The checkout's root may sit below the repository's (bake's copy of the stand-in does).
	prefix=$(git rev-parse --show-prefix)
	_refuse "tracked changes not committed" "$(git -c core.fileMode=false diff --name-status -- .)"
	_refuse "staged changes" "$(git diff --cached --name-status HEAD -- .)"
	_refuse "untracked files" "$(git ls-files --others --exclude-standard)"
	mkdir "$context"
	git archive --format=tar "HEAD:$prefix" >"$WORK_DIR/context.tar"
	tar -xf "$WORK_DIR/context.tar" -C "$context"
	printf 'target "_common-rocm" {\n  context = "%s"\n}\n' "$context" >"$WORK_DIR/context.hcl"
}

# An -f file that puts the hash on the ci_base targets: ci-base-rocm-ci inherits no label.
_label_file() {
	local hash=$1 target
	for target in ci-base-rocm ci-base-rocm-ci; do
		printf 'target "%s" {\n  labels = { "%s" = "%s" }\n}\n' "$target" "$HASH_LABEL" "$hash"
	done >"$WORK_DIR/ci-base-label.hcl"
	printf '%s\n' "$WORK_DIR/ci-base-label.hcl"
}

_main() {
	local target=${1:?usage: ci-bake-rocm.sh TARGET}
	local files=(-f docker/docker-bake-rocm.hcl -f docker/ci-rocm.hcl)
	local hash remote source=.
	cd "$(dirname "$0")/../.."
	WORK_DIR=$(mktemp -d)
	trap 'rm -rf "$WORK_DIR"' EXIT
	if [ "${BUILDKITE:-false}" = true ]; then
		_git_context
		# A context outside the working directory is a file-system entitlement for Docker Bake.
		files+=(-f "$WORK_DIR/context.hcl" "--allow=fs.read=$WORK_DIR/context")
		source=$WORK_DIR/context
	fi
	case $target in
	ci-base-rocm*)
		# As vLLM's wrapper does: later steps (GPU jobs) read which ci_base this build uses.
		if command -v buildkite-agent >/dev/null; then
			buildkite-agent meta-data set rocm-ci-base-image "$CI_BASE_IMAGE_TAG"
		fi
		hash=$(cd "$source" && _ci_base_hash)
		remote=$(_remote_hash)
		echo >&2 "ci_base content hash: $hash"
		if [ "$remote" = "$hash" ]; then
			echo >&2 "ci_base is current: $CI_BASE_IMAGE_TAG carries $HASH_LABEL=$hash; skipping the build"
			return 0
		fi
		echo >&2 "ci_base must be built: $CI_BASE_IMAGE_TAG carries ${remote:-no $HASH_LABEL (or there is no such image)}"
		files+=(-f "$(_label_file "$hash")")
		export CI_BASE_CONTENT_HASH=$hash
		;;
	esac
	: "${CI_BASE_IMAGE:=$CI_BASE_IMAGE_TAG}"
	export CI_BASE_IMAGE CI_BASE_IMAGE_TAG
	if [ "${BAKE_PRINT_ONLY:-0}" = 1 ]; then
		docker buildx bake "${files[@]}" --print "$target"
		return 0
	fi
	docker buildx bake "${files[@]}" --progress=plain "$target"
}

_main "$@"

#!/bin/sh
# The fetch stage's one step: fetch, verify and lay out the selected assets.
#   fetch-assets MANIFEST OUT ASSET_ROOT
# writes OUT/ASSET_ROOT (the full in-image path, so the layer does not depend on
# how COPY would create parents), with fixed modes and mtimes.
# Reads the build args ASSET_GROUPS, ASSET_MIRRORS, ASSET_DIGEST, BAKE_FETCH_ARGS,
# HF_ENDPOINT and SOURCE_DATE_EPOCH, and the optional BuildKit secrets hf_token
# and ca_bundle under /run/secrets.
set -eu
manifest=$1
out=$2
dest=$2$3

set --
for group in ${ASSET_GROUPS:-}; do set -- "$@" --group "$group"; done

digest=$(python3 -m bake manifest digest --manifest "$manifest" "$@")
if [ -n "${ASSET_DIGEST:-}" ] && [ "$digest" != "$ASSET_DIGEST" ]; then
	echo >&2 "bake: ASSET_DIGEST=$ASSET_DIGEST, but the manifest with groups '${ASSET_GROUPS:-}' has digest $digest; pass the value of \`bake manifest digest\`"
	exit 2
fi

ca=
if [ -s /run/secrets/ca_bundle ]; then ca=/run/secrets/ca_bundle; fi
if [ -s /run/secrets/hf_token ]; then export HF_TOKEN_FILE=/run/secrets/hf_token; fi
if [ -n "${HF_ENDPOINT:-}" ]; then export HF_ENDPOINT; fi

# Everything else is the standard library; huggingface_hub comes in only when a
# selected asset has an hf:// source, into a directory this stage throws away.
if python3 -m bake manifest --manifest "$manifest" "$@" | grep -q '"hf://'; then
	if ! python3 -m pip --version >/dev/null 2>&1; then
		echo >&2 "bake: $manifest has hf:// sources, which need huggingface_hub, but FETCH_IMAGE has no pip; use a FETCH_IMAGE with pip, or mirror those files to https://"
		exit 3
	fi
	python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check ${ca:+--cert "$ca"} \
		--target /tmp/bake-hf 'huggingface_hub>=0.24'
	export PYTHONPATH="/tmp/bake-hf${PYTHONPATH:+:$PYTHONPATH}"
fi

# shellcheck disable=SC2086 # BAKE_FETCH_ARGS is a list of options, split on purpose
BAKE_MIRRORS="${ASSET_MIRRORS:-}" python3 -m bake fetch --manifest "$manifest" --dest "$dest" \
	${ca:+--ca-bundle "$ca"} ${BAKE_FETCH_ARGS:-} "$@"
python3 -m bake seal --manifest "$manifest" --dest "$dest" "$@"
find "$out" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-0}" {} +

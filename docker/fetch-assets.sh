#!/bin/sh
# The fetch stage's one step: fetch, verify and lay out the selected assets.
#   fetch-assets MANIFEST OUT ASSET_ROOT
# writes OUT/ASSET_ROOT (the full in-image path, so the layer does not depend on
# how COPY would create parents), with fixed modes and mtimes.
# Reads the build args ASSET_GROUPS, ASSET_MIRRORS, ASSET_DIGEST, BAKE_FETCH_ARGS,
# HF_ENDPOINT and SOURCE_DATE_EPOCH, and the optional BuildKit secrets hf_token,
# ca_bundle and bake_mirrors under /run/secrets.
set -eu
manifest=$1
out=$2
dest=$2$3

# A build argument is recorded in the image's provenance, so mirrors that carry
# credentials come only through the bake_mirrors secret.
set -f
for item in ${ASSET_MIRRORS:-}; do
	for url in "${item%%=*}" "${item#*=}"; do
		authority=${url#*://}
		authority=${authority%%/*}
		case $url in *://*) ;; *) continue ;; esac
		case $authority in
		*@*)
			echo >&2 "bake: ASSET_MIRRORS holds credentials (for ${authority##*@}); a build argument lands in provenance: pass such mirrors as the bake_mirrors secret, e.g. --secret id=bake_mirrors,env=BAKE_MIRRORS"
			exit 2
			;;
		esac
	done
done
set +f
mirrors=${ASSET_MIRRORS:-}
if [ -s /run/secrets/bake_mirrors ]; then mirrors="$mirrors $(cat /run/secrets/bake_mirrors)"; fi
# Outside a build (or with a secret mounted as env), BAKE_MIRRORS itself is honoured too.
mirrors="$mirrors ${BAKE_MIRRORS:-}"

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
BAKE_MIRRORS="$mirrors" python3 -m bake fetch --manifest "$manifest" --dest "$dest" \
	${ca:+--ca-bundle "$ca"} ${BAKE_FETCH_ARGS:-} "$@"
python3 -m bake seal --manifest "$manifest" --dest "$dest" "$@"
find "$out" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-0}" {} +

#!/bin/sh
# Local Docker toolchain for bake's builds and tests: Debian's engine and buildx,
# a loopback registry on 127.0.0.1:5000 and debootstrap stand-in base images.
#
#   scripts/toolchain.sh up|down|status|env
#
# up: installs what is missing and starts what is not running (run as root);
# down: stops what up started, by pid; status: exits 0 when all is ready;
# env: prints export lines for other scripts to eval.
set -eu

: "${BAKE_RUN_DIR:=/run/bake}"
CACHE_DIR=/var/cache/bake
REGISTRY_ROOT=/var/lib/bake-registry
REGISTRY=127.0.0.1:5000
STANDIN=local/rocm-standin
STANDIN_REMOTE="$REGISTRY/rocm-standin"
DEBIAN_SOURCES=/etc/apt/sources.list.d/debian.sources
APT_PINS=/etc/apt/preferences.d/bake-docker
# The engine's settings (no bridge, no iptables, the network-host entitlement), shared with
# scripts/bench.py's second engine.
DOCKERD_CONFIG="$(cd "$(dirname "$0")" && pwd)/dockerd.json"
# dockerd and debootstrap live in sbin, which a non-login PATH may lack.
PATH="$PATH:/usr/sbin:/sbin"

_die() {
	echo >&2 "toolchain: $*"
	exit 1
}

_log() {
	echo "toolchain: $*"
}

# Paths removed when the script exits, whatever the outcome.
_cleanup_paths=""
_cleanup() {
	for p in $_cleanup_paths; do
		rm -rf "$p"
	done
}
trap _cleanup EXIT

# --- apt -------------------------------------------------------------------

_codename() {
	sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"'
}

# The suites this machine lacks, out of the two the engine and buildx come from.
_extra_suites() {
	case "$1" in
	bookworm) echo "trixie sid" ;;
	trixie) echo "sid" ;;
	*) _die "VERSION_CODENAME='$1' in /etc/os-release: only Debian 12 (bookworm) and 13 (trixie) are supported." ;;
	esac
}

_pin_priority() {
	case "$1" in
	trixie) echo 100 ;;
	sid) echo 50 ;;
	esac
}

# The deb822 stanza of debian.sources that carries the machine's own suite.
_debian_stanza() {
	[ -r "$DEBIAN_SOURCES" ] || _die "$DEBIAN_SOURCES is missing: add the Debian archive there (deb822 format) and rerun."
	stanza=$(awk -v c="$1" 'BEGIN { RS = "" } {
		s = 0
		for (i = 1; i <= NF; i++) if ($i == "Suites:") { s = i; break }
		if (!s) next
		for (i = s + 1; i <= NF && $i !~ /:$/; i++) if ($i == c) { print; exit }
	}' "$DEBIAN_SOURCES")
	[ -n "$stanza" ] || _die "no entry for suite '$1' in $DEBIAN_SOURCES: add one (Types/URIs/Suites/Components/Signed-By) and rerun."
	printf '%s\n' "$stanza"
}

_debian_uri() {
	stanza=$(_debian_stanza "$1")
	printf '%s\n' "$stanza" | awk '$1 == "URIs:" { print $2; exit }'
}

# Writes $2 to $1 unless $1 already holds exactly that.
_write_if_changed() {
	if [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; then
		return 0
	fi
	printf '%s\n' "$2" >"$1.tmp"
	mv "$1.tmp" "$1"
	_log "wrote $1"
}

# Adds suites $2 as copies of the entry for $1 in debian.sources, and pins them low.
_apt_sources() {
	stanza=$(_debian_stanza "$1")
	# shellcheck disable=SC2016 # apt's own $(FIELD) placeholders
	targets=$(apt-get indextargets --no-release-info --format '$(RELEASE) $(SOURCESENTRY)')
	pins=""
	for suite in $2; do
		own="/etc/apt/sources.list.d/bake-$suite.sources"
		# A suite that another sources file already configures gets no file of ours.
		if ! printf '%s\n' "$targets" | awk -v s="$suite" -v own="$own:" \
			'$1 == s && index($2, own) != 1 { found = 1 } END { exit !found }'; then
			_write_if_changed "$own" "$(printf '%s\n' "$stanza" | sed "s/^Suites:.*/Suites: $suite/")"
		fi
		# apt ignores every stanza after the first when the blank line between them is missing.
		pins="$pins${pins:+

}Package: *
Pin: release n=$suite
Pin-Priority: $(_pin_priority "$suite")"
	done
	_write_if_changed "$APT_PINS" "$pins"
}

# Fails unless every suite in $1 shows up in apt's policy at its pin priority.
_check_pins() {
	policy=$(apt-cache policy)
	for suite in $1; do
		want=$(_pin_priority "$suite")
		seen=$(printf '%s\n' "$policy" | awk -v s="$suite" '$1 ~ /^[0-9]+$/ && index($3, s "/") == 1 { print $1 }' | sort -u | tr '\n' ' ')
		[ "$seen" = "$want " ] ||
			_die "apt pin for $suite not in effect (priority seen: '${seen% }', wanted $want): check $APT_PINS (blank line between stanzas) and 'apt-cache policy'."
	done
}

_installed() {
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

_apt_install() {
	# cosign comes from trixie (2.5.0, what bake's signing is tested with; sid has 3.x). Only
	# `bake publish --sign` and the --verify-key checks need it; bake runs without it.
	# zsh: tests/test_usage.py checks the zsh completion script bake generates.
	wanted="docker.io/trixie docker-cli/trixie docker-buildx/sid cosign/trixie docker-registry debootstrap aria2 busybox dash git curl zsh"
	command -v npm >/dev/null 2>&1 || wanted="$wanted nodejs npm"
	missing=""
	for spec in $wanted; do
		_installed "${spec%/*}" || missing="$missing $spec"
	done
	if [ -z "$missing" ]; then
		_log "packages already installed"
		return 0
	fi
	_log "installing:$missing"
	codename=$(_codename)
	suites=$(_extra_suites "$codename")
	_apt_sources "$codename" "$suites"
	apt-get update -qq || _die "apt-get update failed: check the sources in /etc/apt/sources.list.d and the network to the Debian archive."
	_check_pins "$suites"
	# shellcheck disable=SC2086 # $missing is a word list of package specs
	sim=$(apt-get -s install --no-install-recommends $missing) ||
		_die "apt-get cannot resolve:$missing; run 'apt-get -s install$missing' to see why."
	touched=$(printf '%s\n' "$sim" | awk '($1 == "Inst" && $3 ~ /^\[/) || $1 == "Remv"')
	[ -z "$touched" ] || _die "installing$missing would upgrade or remove installed packages, refusing:
$touched
Check the pins in $APT_PINS."
	# Package scripts must not start the stock services: dockerd with a bridge,
	# a registry on every interface with auth.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		_cleanup_paths="$_cleanup_paths /usr/sbin/policy-rc.d"
	fi
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
		_die "apt-get install$missing failed: rerun it by hand to see the error."
}

_buildx_has_allow() {
	docker buildx bake --help 2>/dev/null | grep -q -- '--allow'
}

_check_buildx() {
	_buildx_has_allow && return 0
	got=$(docker buildx version 2>&1 || true)
	_die "'docker buildx bake --help' does not list --allow (buildx: ${got:-not found}); test bake files need it for network=host: install docker-buildx from sid (0.29.1 works) with 'apt-get install docker-buildx/sid'."
}

# --- daemons ---------------------------------------------------------------

# Prints the pid in pid file $1 when that process is still a $2 (guards against pid reuse).
_our_pid() {
	[ -s "$1" ] || return 1
	pid=$(cat "$1")
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
	echo "$pid"
}

# Starts "$@" in its own session with stdio on log $2; the pid file $1 holds its pid.
_spawn() {
	pidfile=$1 log=$2
	shift 2
	# The inner sh writes its own pid and then becomes the daemon, so the pid is
	# right even when setsid has to fork.
	# fd 9 is the toolchain lock, which a daemon must not hold.
	# shellcheck disable=SC2016 # expanded by the inner sh
	setsid sh -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$pidfile" "$@" </dev/null >"$log" 2>&1 9>&- &
}

_fail_with_log() {
	echo >&2 "toolchain: $1; last lines of $2:"
	tail -n 20 "$2" >&2 || true
	_die "$3"
}

# Waits up to $3 s for command "$@" (after 4 args) to succeed while pid file $1's $2 lives.
_wait_for() {
	pidfile=$1 comm=$2 secs=$3 log=$4
	shift 4
	deadline=$(($(date +%s) + secs))
	until "$@"; do
		sleep 0.5
		if ! _our_pid "$pidfile" "$comm" >/dev/null && [ -s "$pidfile" ]; then
			_fail_with_log "$comm exited during start-up" "$log" "fix the cause above, then rerun '$0 up'."
		fi
		[ "$(date +%s)" -lt "$deadline" ] ||
			_fail_with_log "$comm did not answer within ${secs}s" "$log" "fix the cause above, then run '$0 down' and '$0 up'."
	done
}

_engine_answers() {
	docker info >/dev/null 2>&1
}

_start_engine() {
	pidfile="$BAKE_RUN_DIR/dockerd.pid"
	if _engine_answers; then
		_log "engine already answers"
		return 0
	fi
	if ! _our_pid "$pidfile" dockerd >/dev/null; then
		command -v dockerd >/dev/null || _die "dockerd not found: run '$0 up' as root so it can install docker.io."
		rm -f "$pidfile"
		config="$BAKE_RUN_DIR/dockerd.json"
		# No bridge: containers get --network none or host, and nothing reaches a private range.
		# Bake targets in tests build with network=host; the engine must grant it.
		_write_if_changed "$config" "$(cat "$DOCKERD_CONFIG")"
		_spawn "$pidfile" "$BAKE_RUN_DIR/dockerd.log" dockerd --config-file "$config"
		_log "started dockerd (log: $BAKE_RUN_DIR/dockerd.log)"
	fi
	_wait_for "$pidfile" dockerd 60 "$BAKE_RUN_DIR/dockerd.log" _engine_answers
}

_registry_answers() {
	curl -fsS --noproxy '*' --max-time 5 -o /dev/null "http://$REGISTRY/v2/" 2>/dev/null
}

_start_registry() {
	pidfile="$BAKE_RUN_DIR/registry.pid"
	if _registry_answers; then
		_log "registry already answers on $REGISTRY"
		return 0
	fi
	if ! _our_pid "$pidfile" docker-registry >/dev/null; then
		rm -f "$pidfile"
		mkdir -p "$REGISTRY_ROOT"
		config="$BAKE_RUN_DIR/registry.yml"
		# Loopback only and no auth, unlike the package's stock config.
		_write_if_changed "$config" "version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $REGISTRY_ROOT
http:
  addr: $REGISTRY"
		_spawn "$pidfile" "$BAKE_RUN_DIR/registry.log" docker-registry serve "$config"
		_log "started docker-registry (log: $BAKE_RUN_DIR/registry.log)"
	fi
	_wait_for "$pidfile" docker-registry 20 "$BAKE_RUN_DIR/registry.log" _registry_answers
}

# Sends SIGTERM to the $2 in pid file $1, waits for it to exit and removes the pid file.
_stop() {
	pidfile=$1 comm=$2
	if ! pid=$(_our_pid "$pidfile" "$comm"); then
		[ ! -e "$pidfile" ] || {
			rm -f "$pidfile"
			_log "$comm was not running (removed stale $pidfile)"
		}
		return 0
	fi
	kill -TERM "$pid"
	# dockerd gives running containers 15 s to stop.
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -le 60 ] || _die "$comm (pid $pid) still runs 30 s after SIGTERM: see its log in $BAKE_RUN_DIR, then 'kill -KILL $pid'."
		sleep 0.5
	done
	rm -f "$pidfile"
	_log "stopped $comm (pid $pid)"
}

# --- stand-in base images --------------------------------------------------

_image_exists() {
	docker image inspect "$1" >/dev/null 2>&1
}

# Prints the registry's manifest digest for stand-in tag $1; fails when it has none.
_registry_digest() {
	curl -fsSI --noproxy '*' --max-time 10 \
		-H 'Accept: application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json' \
		"http://$REGISTRY/v2/rocm-standin/manifests/$1" 2>/dev/null |
		tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" { print $2; found = 1 } END { exit !found }'
}

# Builds the root file system for tag $1 with packages $2 into tarball $3, of Debian suite $4.
_debootstrap() {
	uri=$(_debian_uri "$(_codename)")
	mkdir -p "$CACHE_DIR/debs"
	root=$(mktemp -d "$CACHE_DIR/rootfs-$1.XXXXXX")
	# mktemp makes it 0700, which would become the image's /.
	chmod 755 "$root"
	_cleanup_paths="$_cleanup_paths $root $3.tmp"
	log="$BAKE_RUN_DIR/debootstrap-$1.log"
	_log "debootstrap $1 ($4, --include=$2) from $uri"
	debootstrap --variant=minbase --include="$2" --cache-dir="$CACHE_DIR/debs" \
		"$4" "$root" "$uri" >"$log" 2>&1 || {
		[ ! -f "$root/debootstrap/debootstrap.log" ] || cat "$root/debootstrap/debootstrap.log" >>"$log"
		_fail_with_log "debootstrap of $STANDIN:$1 failed" "$log" "check access to $uri and free space in $CACHE_DIR, then rerun '$0 up'."
	}
	# Downloaded .debs and package lists are ~90 MB no image needs (as in Debian's own images).
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_*
	tar --numeric-owner -C "$root" -cf "$3.tmp" .
	mv "$3.tmp" "$3"
	rm -rf "$root"
}

# Makes $STANDIN:$1 (packages $2, Debian suite $3) exist locally and in the registry.
_standin() {
	tag=$1 local_ref="$STANDIN:$1" remote_ref="$STANDIN_REMOTE:$1"
	tarball="$CACHE_DIR/rocm-standin-$1.tar"
	if ! _image_exists "$local_ref"; then
		if _registry_digest "$tag" >/dev/null; then
			# An image wipe must not cost a debootstrap; the pull also keeps the image ID.
			docker pull -q "$remote_ref" >/dev/null || _die "docker pull $remote_ref failed: check '$0 status' and the registry log in $BAKE_RUN_DIR."
			docker tag "$remote_ref" "$local_ref"
			_log "pulled $local_ref back from $REGISTRY"
		else
			[ -s "$tarball" ] || _debootstrap "$tag" "$2" "$tarball" "$3"
			docker import "$tarball" "$local_ref" >/dev/null || _die "docker import $tarball failed: delete the file and rerun '$0 up'."
			_log "imported $local_ref from $tarball"
		fi
	fi
	digest=$(_registry_digest "$tag" || true)
	if [ -z "$digest" ] || ! docker image inspect --format '{{join .RepoDigests "\n"}}' "$local_ref" | grep -qxF "$STANDIN_REMOTE@$digest"; then
		docker tag "$local_ref" "$remote_ref"
		docker push -q "$remote_ref" >/dev/null || _die "docker push $remote_ref failed: check the registry log in $BAKE_RUN_DIR."
		_log "pushed $remote_ref"
	fi
}

# --- commands --------------------------------------------------------------

_lock() {
	mkdir -p "$BAKE_RUN_DIR"
	exec 9>"$BAKE_RUN_DIR/lock"
	flock 9
}

_up() {
	[ "$(id -u)" -eq 0 ] || _die "'$0 up' installs packages and starts daemons: run it as root."
	_lock
	_apt_install
	_check_buildx
	_start_engine
	_start_registry
	mkdir -p "$CACHE_DIR"
	_standin bookworm python3,ca-certificates,python3-pip bookworm
	# A genuinely different second base, for layer-reuse tests.
	_standin bookworm-slim python3,ca-certificates bookworm
	# Debian 13's own python3, for the README's install (tests/image/test_install.py).
	_standin trixie python3,ca-certificates trixie
	_log "$(docker version --format 'engine {{.Server.Version}}, client {{.Client.Version}}')"
	_log "$(docker buildx version)"
	_log "registry $REGISTRY: $(docker-registry --version)"
	docker image ls --format 'toolchain: image {{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' "$STANDIN"
}

_down() {
	_lock
	_stop "$BAKE_RUN_DIR/registry.pid" docker-registry
	_stop "$BAKE_RUN_DIR/dockerd.pid" dockerd
}

_status() {
	_engine_answers || _die "engine: 'docker info' does not answer; run '$0 up'."
	_buildx_has_allow || _die "buildx: 'docker buildx bake --help' lacks --allow; run '$0 up'."
	_registry_answers || _die "registry: http://$REGISTRY/v2/ does not answer; run '$0 up'."
	for tag in bookworm bookworm-slim trixie; do
		_image_exists "$STANDIN:$tag" || _die "stand-in: image $STANDIN:$tag is missing; run '$0 up'."
		_registry_digest "$tag" >/dev/null || _die "stand-in: $STANDIN_REMOTE:$tag is not in the registry; run '$0 up'."
	done
	_log "ready"
}

_env() {
	echo "export BAKE_REGISTRY=$REGISTRY"
	echo "export BAKE_STANDIN_BASE=$STANDIN:bookworm"
	echo "export BAKE_STANDIN_BASE_ALT=$STANDIN:bookworm-slim"
	echo "export BAKE_STANDIN_TRIXIE=$STANDIN:trixie"
}

case "${1:-}" in
up) _up ;;
down) _down ;;
status) _status ;;
env) _env ;;
*) _die "usage: $0 up|down|status|env" ;;
esac

#!/bin/sh
# bake-entrypoint: serve the baked assets where s3tokenizer, openai-harmony and
# tiktoken look for them, then exec the job.
#
# Usage: bake-entrypoint COMMAND [ARG...]        set up, then exec COMMAND
#        bake-entrypoint --print-env             set up, print `export VAR='...'`
#                                                 lines for eval, run nothing
#        bake-entrypoint                         set up, run nothing, exit 0
#
# Managed locations, each fed from $BAKE_ASSETS/SHA256SUMS (default
# /opt/bake/assets): ${XDG_CACHE_HOME:-$HOME/.cache}/s3tokenizer gets the
# s3tokenizer/* files; $TIKTOKEN_RS_CACHE_DIR and $TIKTOKEN_CACHE_DIR get the
# tiktoken/<sha1> files. A kind with no baked file leaves its locations alone.
#   nothing, empty dir, dangling link -> a real directory with one link per file
#   a directory holding only links to baked files (a concurrent run's, or an
#   older image's subset) -> the missing links are added
#   a directory whose baked names all link to the baked files -> left as is
#   data (any other non-empty directory, or a link to one) -> never written:
#     s3tokenizer uses a regular file of the baked size already there, else warns;
#     a TIKTOKEN_* variable is re-pointed, for this job only, to a job-local
#     directory linking the baked files first and then every other entry of the
#     data directory. Baked files win a shared name: the name is the SHA-1 of the
#     URL, so they are the bytes that name stands for, and the consumers would
#     delete a bad copy in place. Links left dangling by a shrunken data directory
#     are pruned there on the next run.
#   a file where a directory belongs -> left alone, with a warning.
# An unset or empty TIKTOKEN_* is exported to a job-local directory; an empty one
# included, which turns tiktoken's "caching off" into serving the baked vocab.
# A location that cannot be created (read-only root, HOME=/ as a non-root user,
# no HOME and no passwd entry, unwritable XDG_CACHE_HOME) falls back to
# job-local: XDG_CACHE_HOME is exported, and the ready line says so.
# Job-local means ${TMPDIR:-/tmp}/bake-<uid>, mode 0700 and owned by us; if that
# name is taken by someone else in a shared /tmp, a fresh mktemp directory.
#
# Environment: BAKE_ASSETS, BAKE_VERIFY=1 (sha256sum -c first; exit 3 on a
# mismatch), BAKE_REQUIRE=1 (exit 6 if any location cannot be served),
# BAKE_QUIET=1 (no ready line). Flags take 1/true/yes/on or 0/false/no/off/empty.
# Exit codes before the job: 2 bad usage, 3 verification, 6 unservable.
# No baked assets at all: a warning and the job runs (exit 3 under BAKE_VERIFY,
# 6 under BAKE_REQUIRE).
#
# Speed: a run whose links already exist forks nothing but the ready line's clock
# (none under busybox/bash, which have $EPOCHREALTIME).
set -eu
# Word splitting is only ever used on newline-separated name lists below.
set -f
nl='
'
IFS=$nl

_flag() { # $1 name: succeed when the variable is on; exit 2 on a value that is neither
	eval "_v=\${$1:-}"
	case $_v in
	1 | true | yes | on | TRUE | YES | ON) return 0 ;;
	'' | 0 | false | no | off | FALSE | NO | OFF) return 1 ;;
	esac
	printf '%s\n' "bake: error: $1='$_v': expected 1 (on) or 0 (off); set it to 1 or unset it" >&2
	exit 2
}

_ms() { # sets ms to a millisecond clock reading, or empty when the shell has none
	# busybox ash and bash have $EPOCHREALTIME; dash pays one date fork.
	# shellcheck disable=SC3028
	case ${EPOCHREALTIME:-} in
	*[.,]*)
		ms=${EPOCHREALTIME%[.,]*}${EPOCHREALTIME#*[.,]}
		ms=${ms%???}
		;;
	*)
		ms=$(date +%s%N 2>/dev/null) || ms=
		case $ms in *[!0-9]* | '') ms= ;; *) ms=${ms%??????} ;; esac
		;;
	esac
}

_quiet=
if _flag BAKE_QUIET; then _quiet=1; else _ms; _t0=$ms; fi

_usage() {
	# shellcheck disable=SC2016 # the $(...) is text for the reader to run
	printf '%s\n' 'usage: bake-entrypoint COMMAND [ARG...]' \
		'       bake-entrypoint --print-env    (runners: eval "$(bake-entrypoint --print-env)")'
}

_mode=run
case ${1:-} in
--print-env)
	if [ $# -ne 1 ]; then
		printf '%s\n' "bake: error: --print-env takes no command, saw '$2'; run the command after eval \"\$(bake-entrypoint --print-env)\"" >&2
		exit 2
	fi
	_mode='env'
	;;
-h | --help)
	_usage
	exit 0
	;;
-*)
	printf '%s\n' "bake: error: unknown option '$1': expected --print-env, --help or a command (exec cannot take one that starts with -); run it through sh -c" >&2
	_usage >&2
	exit 2
	;;
esac

_require=
if _flag BAKE_REQUIRE; then _require=1; fi
_unserved=0 _notes='' _exports=''

_problem() { # $1 location, $2 expected, $3 seen, $4 what to do: one warning (error under BAKE_REQUIRE)
	_unserved=$((_unserved + 1))
	if [ -n "$_require" ]; then
		printf '%s\n' "bake: error: $1: expected $2, saw $3; $4" >&2
	else
		printf '%s\n' "bake: warning: $1: expected $2, saw $3; $4" >&2
	fi
}

_export() { # $1 name, $2 value: export for the job and remember it for --print-env
	eval "$1=\$2"
	export "${1?}"
	_exports=$_exports$nl$1
}

_abs() { # $1 path: sets _a to it, made absolute against the working directory
	case $1 in /*) _a=$1 ;; *) _a=$PWD/$1 ;; esac
}

_abs "${BAKE_ASSETS:-/opt/bake/assets}"
_assets=$_a

# Baked names per kind, newline-separated; other paths in SHA256SUMS are not ours
# to serve. _sums keeps "<sha256> <path>" lines for BAKE_VERIFY's messages.
_s3='' _tk='' _sums=''
if [ -r "$_assets/SHA256SUMS" ]; then
	while IFS=' 	' read -r _sum _path || [ -n "${_path:-}" ]; do
		_path=${_path#\*}
		_sums=$_sums$nl$_sum' '$_path
		case $_path in
		*/*/*) ;;
		s3tokenizer/?*) _s3=$_s3$nl${_path#*/} ;;
		tiktoken/?*) _tk=$_tk$nl${_path#*/} ;;
		esac
	done <"$_assets/SHA256SUMS"
fi

if [ -z "$_s3$_tk" ]; then
	if [ -r "$_assets/SHA256SUMS" ]; then
		_seen="a SHA256SUMS that lists no s3tokenizer/ or tiktoken/ file"
	elif [ -d "$_assets" ]; then
		_seen="a directory without a readable SHA256SUMS"
	else
		_seen="nothing there"
	fi
	_what="BAKE_ASSETS=$_assets: expected the baked asset directory with its SHA256SUMS, saw $_seen"
	_fix="run the image that bake built, or set BAKE_ASSETS to its asset directory"
	if _flag BAKE_VERIFY; then
		printf '%s\n' "bake: error: BAKE_VERIFY=1: nothing to verify: $_what; $_fix; job not started" >&2
		exit 3
	fi
	if [ -n "$_require" ]; then
		printf '%s\n' "bake: error: BAKE_REQUIRE=1: $_what; $_fix; job not started" >&2
		exit 6
	fi
	printf '%s\n' "bake: warning: $_what; no location served, the job may download; $_fix" >&2
	if [ $_mode = env ]; then exit 0; fi
	exec "$@"
fi

_verify() { # sha256sum -c over SHA256SUMS; exit 3 naming every file that fails
	if ! command -v sha256sum >/dev/null 2>&1; then
		printf '%s\n' "bake: error: BAKE_VERIFY=1: expected sha256sum on PATH to check $_assets/SHA256SUMS, saw none; install coreutils or busybox, or unset BAKE_VERIFY; job not started" >&2
		exit 3
	fi
	# sha256sum's own output, not --quiet: busybox has no --quiet.
	if _out=$(cd "$_assets" && sha256sum -c SHA256SUMS 2>&1); then return 0; fi
	_bad=0
	for _line in $_out; do
		case $_line in *': FAILED'*) ;; *) continue ;; esac
		_bad=$((_bad + 1))
		_f=${_line%%: FAILED*}
		_want=unknown
		for _l in $_sums; do
			if [ "${_l#* }" = "$_f" ]; then _want=${_l%% *}; fi
		done
		if _got=$(sha256sum <"$_assets/$_f" 2>/dev/null); then _got="sha256 ${_got%% *}"; else _got="no readable file"; fi
		printf '%s\n' "bake: error: BAKE_VERIFY=1: $_assets/$_f: expected sha256 $_want (SHA256SUMS), saw $_got; the image's asset layer is damaged: pull the image again or rebuild it; job not started" >&2
	done
	if [ $_bad -eq 0 ]; then
		printf '%s\n' "bake: error: BAKE_VERIFY=1: sha256sum -c $_assets/SHA256SUMS: expected every file OK, saw: $_out; rebuild the image or fix BAKE_ASSETS; job not started" >&2
	fi
	exit 3
}
if _flag BAKE_VERIFY; then _verify; fi

_names() { # $1 kind: sets _n to that kind's baked names
	case $1 in s3tokenizer) _n=$_s3 ;; *) _n=$_tk ;; esac
}

_same_size() { # $1 file, $2 baked file: succeed when both are regular files of one size
	[ -f "$1" ] || return 1
	_sz=$(stat -L -c %s -- "$1" "$2" 2>/dev/null) || return 1
	[ "${_sz%"$nl"*}" = "${_sz#*"$nl"}" ]
}

_served() { # $1 dir, $2 kind: succeed when every baked file is in dir (s3tokenizer: or a valid copy)
	_names "$2"
	for _e in $_n; do
		[ "$1/$_e" -ef "$_assets/$2/$_e" ] && continue
		[ "$2" = s3tokenizer ] && _same_size "$1/$_e" "$_assets/$2/$_e" && continue
		return 1
	done
}

# A directory's entries are walked by glob, hidden ones included, never kept in a
# newline-separated list: a user's file name may hold any character.
_only_links() { # $1 dir, $2 kind: succeed when every entry links to the baked file of its name
	set +f
	for _e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		{ [ -e "$_e" ] || [ -L "$_e" ]; } || continue
		if [ ! -L "$_e" ] || [ ! "$_e" -ef "$_assets/$2/${_e##*/}" ]; then
			set -f
			return 1
		fi
	done
	set -f
}

_link() { # $1 dir, then targets: link each target whose name dir lacks
	_ld=$1
	shift
	for _e in "$@"; do
		shift
		{ [ -e "$_e" ] || [ -L "$_e" ]; } || continue # an unmatched glob
		[ -e "$_ld/${_e##*/}" ] || [ -L "$_ld/${_e##*/}" ] || set -- "$@" "$_e"
	done
	[ $# -eq 0 ] || ln -s -- "$@" "$_ld/" 2>/dev/null || :
}

_baked() { # $1 kind: sets _n to the absolute paths of its baked files
	_names "$1"
	_p=
	for _e in $_n; do _p=$_p$nl$_assets/$1/$_e; done
	_n=$_p
}

# Serve one location. Returns 0 served, 1 could not be made or written,
# 2 data without the baked files, 3 a non-directory where a directory belongs.
_serve() { # $1 kind, $2 location
	if [ -d "$2" ]; then
		_served "$2" "$1" && return 0
		_only_links "$2" "$1" || return 2
	elif [ -e "$2" ]; then
		return 3
	elif [ -L "$2" ]; then
		rm -f -- "$2" 2>/dev/null && mkdir -p -- "$2" 2>/dev/null || return 1
	else
		mkdir -p -- "$2" 2>/dev/null || return 1
	fi
	_baked "$1"
	# shellcheck disable=SC2086 # _n is a newline-separated list; IFS is newline
	_link "$2" $_n
	_served "$2" "$1" || return 1
}

_find_uid() { # sets _uid to the effective uid, without a fork where /proc allows
	[ -z "${_uid:-}" ] || return 0
	if [ -r /proc/self/status ]; then
		while IFS='	' read -r _k _ _e _; do
			if [ "$_k" = Uid: ]; then
				_uid=$_e
				break
			fi
		done </proc/self/status
	fi
	[ -n "${_uid:-}" ] || _uid=$(id -u)
}

_make_jobdir() { # sets _job to a private directory of ours under ${TMPDIR:-/tmp}
	[ -z "${_job:-}" ] || return 0
	_find_uid
	_abs "${TMPDIR:-/tmp}"
	_tmp=$_a
	_job=$_tmp/bake-$_uid
	# Ours only if a real directory that we own: nobody else can plant one in a sticky /tmp.
	# test -O is in dash, busybox and bash, and keeps this fork-free.
	# shellcheck disable=SC3067
	if [ -d "$_job" ] && [ ! -L "$_job" ] && [ -O "$_job" ]; then return 0; fi
	mkdir -m 700 -- "$_job" 2>/dev/null || :
	# shellcheck disable=SC3067
	if [ -d "$_job" ] && [ ! -L "$_job" ] && [ -O "$_job" ]; then return 0; fi
	_job=$(mktemp -d "$_tmp/bake-$_uid.XXXXXX" 2>/dev/null) || _job=
	[ -n "$_job" ]
}

_find_home() { # sets _home from HOME, else from the password database; empty if neither knows
	_home=${HOME:-}
	[ -z "$_home" ] || return 0
	_find_uid
	if command -v getent >/dev/null 2>&1; then
		_pw=$(getent passwd "$_uid" 2>/dev/null) || _pw=
		_pw=${_pw#*:*:*:*:*:}
		_home=${_pw%%:*}
	elif [ -r /etc/passwd ]; then
		while IFS=: read -r _ _ _u _ _ _h _; do
			if [ "$_u" = "$_uid" ]; then
				_home=$_h
				break
			fi
		done </etc/passwd
	fi
}

_describe() { # $1 code from _serve: sets _seen to what was found
	case $1 in
	1) _seen="a location that could not be created or written (read-only, or no permission)" ;;
	2) _seen="a directory holding other data, which is never written into" ;;
	*) _seen="a file where a directory belongs, left alone" ;;
	esac
}

_fill() { # $1 job-local dir, $2 kind, $3 data dir or empty: repair, link the baked files, then the data's entries
	set +f
	for _e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		if [ -L "$_e" ] && [ ! -e "$_e" ]; then rm -f -- "$_e" 2>/dev/null || :; fi
	done
	set -f
	_stale=
	_names "$2"
	for _e in $_n; do
		if { [ -e "$1/$_e" ] || [ -L "$1/$_e" ]; } && [ ! "$1/$_e" -ef "$_assets/$2/$_e" ]; then
			_stale=$_stale$nl$1/$_e
		fi
	done
	# shellcheck disable=SC2086 # newline-separated lists; IFS is newline
	[ -z "$_stale" ] || rm -f -- $_stale 2>/dev/null || :
	_baked "$2"
	_from=$3
	# shellcheck disable=SC2086 # newline-separated list of baked paths; IFS is newline
	set -- "$1" $_n
	if [ -n "$_from" ]; then
		set +f
		set -- "$@" "$_from"/* "$_from"/.[!.]* "$_from"/..?*
		set -f
	fi
	_link "$@"
}

_job_local() { # $1 kind, $2 path under the job dir, $3 data dir or empty: succeed when it serves
	_make_jobdir || return 1
	[ -d "$_job/$2" ] || mkdir -p -- "$_job/$2" 2>/dev/null || return 1
	_fill "$_job/$2" "$1" "$3"
	_served "$_job/$2" "$1"
}

_s3tokenizer() {
	_rc=0
	if [ -n "${XDG_CACHE_HOME:-}" ]; then
		_cache=$XDG_CACHE_HOME
	else
		_find_home
		_cache=${_home:+$_home/.cache}
	fi
	if [ -n "$_cache" ]; then
		_where=$_cache/s3tokenizer
		_serve s3tokenizer "$_where" || _rc=$?
	else
		_where="\$HOME/.cache/s3tokenizer (no HOME, no passwd entry for uid $_uid)"
		_rc=1
	fi
	case $_rc in
	0)
		# s3tokenizer reads a set-but-empty XDG_CACHE_HOME as the working directory.
		if [ -z "${XDG_CACHE_HOME:-}" ] && [ -n "${XDG_CACHE_HOME+set}" ]; then
			_export XDG_CACHE_HOME "$_cache"
		fi
		return 0
		;;
	1)
		if _job_local s3tokenizer xdg-cache/s3tokenizer ''; then
			_export XDG_CACHE_HOME "$_job/xdg-cache"
			_notes="$_notes; XDG_CACHE_HOME=$_job/xdg-cache (job-local: $_where cannot be created)"
			return 0
		fi
		_fix="point XDG_CACHE_HOME at a writable directory, or make ${TMPDIR:-/tmp} writable"
		;;
	2) _fix="put the baked files there, or point XDG_CACHE_HOME at an empty or job-local directory" ;;
	*) _fix="remove that file, or point XDG_CACHE_HOME elsewhere" ;;
	esac
	_describe $_rc
	_names s3tokenizer
	_want=
	for _e in $_n; do _want="$_want $_e"; done
	_problem "$_where" "a directory serving$_want from $_assets/s3tokenizer" "$_seen" "$_fix"
}

_tiktoken() { # $1 variable, $2 name of its job-local directory
	eval "_val=\${$1:-}"
	_rc=1 _data=''
	if [ -n "$_val" ]; then
		_rc=0
		_serve tiktoken "$_val" || _rc=$?
		[ $_rc -ne 0 ] || return 0
		if [ $_rc -eq 2 ]; then
			_abs "$_val"
			_data=$_a
		fi
	fi
	# Unset, or set but not servable in place: a job-local directory, for this job only.
	if [ $_rc -ne 3 ] && _job_local tiktoken "$2" "$_data"; then
		_export "$1" "$_job/$2"
		if [ -n "$_val" ]; then _notes="$_notes; $1=$_job/$2 (job-local, $_val left as is)"; fi
		return 0
	fi
	if [ $_rc -eq 3 ]; then
		_fix="remove that file, or unset $1 to get a job-local directory"
	else
		_fix="make ${TMPDIR:-/tmp} writable, or point $1 at a writable directory"
	fi
	_describe $_rc
	_problem "${_val:-\$$1 (unset)}" "a directory serving tiktoken/* from $_assets/tiktoken" "$_seen" "$_fix"
}

if [ -n "$_s3" ]; then _s3tokenizer; fi
if [ -n "$_tk" ]; then
	_tiktoken TIKTOKEN_RS_CACHE_DIR tiktoken-rs-cache
	_tiktoken TIKTOKEN_CACHE_DIR data-gym-cache
fi

if [ $_unserved -gt 0 ] && [ -n "$_require" ]; then
	printf '%s\n' "bake: error: BAKE_REQUIRE=1: $_unserved location(s) above cannot serve the baked files from $_assets; fix them or unset BAKE_REQUIRE; job not started" >&2
	exit 6
fi

if [ -z "$_quiet" ]; then
	# Vocab files by encoding name, through the *.tiktoken links beside them.
	_list=
	for _e in $_s3; do _list="$_list, s3tokenizer/$_e"; done
	for _e in $_tk; do
		_name=$_e
		set +f
		for _l in "$_assets"/tiktoken/*.tiktoken; do
			if [ "$_l" -ef "$_assets/tiktoken/$_e" ]; then
				_name=${_l##*/}
				_name=${_name%.tiktoken}
				break
			fi
		done
		set -f
		_list="$_list, tiktoken/$_name"
	done
	_ms
	if [ -n "$ms" ] && [ -n "$_t0" ]; then _in=" in $((ms - _t0)) ms"; else _in=; fi
	if [ $_unserved -gt 0 ]; then _notes="$_notes; $_unserved location(s) not served, see above"; fi
	printf '%s\n' "bake: assets ready$_in: ${_list#, }$_notes" >&2
fi

if [ $_mode = env ]; then
	for _v in $_exports; do
		eval "_val=\$$_v"
		_q=
		while :; do
			case $_val in
			*\'*)
				_q="$_q${_val%%\'*}'\\''"
				_val=${_val#*\'}
				;;
			*)
				_q=$_q$_val
				break
				;;
			esac
		done
		printf "export %s='%s'\n" "$_v" "$_q"
	done
	exit 0
fi

exec "$@"

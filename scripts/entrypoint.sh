#!/bin/sh
# shellcheck disable=SC3043 # `local` is in dash, busybox ash and bash: every shell this runs under
# bake-entrypoint: serve the baked assets where each consumer looks for them, then exec the job
# (--help lists its modes, variables and exit codes; docs/runtime.md, what each location gets).
# What to serve, and where, is data: the head of $BAKE_ASSETS/bake.serve (docs/SERVE_FORMAT.md),
# read with `read`, never sourced, checked only where it guards this script's evals and paths.
# This is the fast path: a location served already (its links, or its stamp) starts no process.
# What needs Python is `bake seed`'s, with the package's one reader of each format: seeding node
# storage, proving a linked view file by file, the job-local view of a re-pointed variable's
# directory, BAKE_VERIFY's hashing. Each function takes its state as arguments and returns a
# status and at most one result variable, which its caller declares local; `_main "$@"` runs behind
# a guard, so that a test can source this file and call one function.
set -eu
set -f # no globbing of data: switched on only where a directory is listed

_nl='
'
_tab='	'
# What a head record's fields are joined by once read (a tab is IFS white space, which would merge
# an empty field into the next): the unit separator, 0x1f, which no accepted field holds.
_us=''
# The bake this script ships with: bake/__init__.py's version (tests/test_entrypoint.py keeps them equal).
_VERSION=0.2.0
# What _serve_at returns: served; cannot be made or written here (own filesystem); node storage
# left as is, with a warning for ${VAR:-...}/SUB (BAKE_SEED=0, unwritable, no space, a bad copy, no
# bake); node storage served job-local instead (a wait ran out, something in the way); a file.
_SERVED=0 _CANNOT_MAKE=1 _KEEP=2 _MOVE=3 _NOT_A_DIR=4

_say() { # $*: one line to stderr
	printf '%s\n' "bake: $*" >&2
}

_flag() { # $1 variable, $2 its value when unset or empty: succeed when on; exit 2 on anything else
	local value
	eval "value=\${$1:-$2}"
	case $value in
	1 | true | yes | on | TRUE | YES | ON) return 0 ;;
	0 | false | no | off | FALSE | NO | OFF) return 1 ;;
	esac
	_say "error: $1='$value': expected 1 (on) or 0 (off); set it to 1 or unset it"
	exit 2
}

_clock_ms() { # sets _now_ms to a millisecond reading, or empty: the ready line's, nothing else
	local up
	# busybox ash and bash have $EPOCHREALTIME; dash, /proc/uptime's hundredths (read, no process).
	# shellcheck disable=SC3028
	case ${EPOCHREALTIME:-} in *[.,]*)
		_now_ms=${EPOCHREALTIME%[.,]*}${EPOCHREALTIME#*[.,]}
		_now_ms=${_now_ms%???}
		return 0
		;;
	esac
	_now_ms=''
	IFS=' ' read -r up _ 2>/dev/null </proc/uptime || return 0
	case $up in *[!0-9.]* | '' | .* | *.) return 0 ;; esac
	_now_ms=$((${up%.*} * 1000 + (1${up#*.} - 100) * 10)) # 1NN - 100: never read as octal
}

_usage() { # $1 `full` for --help's text
	# shellcheck disable=SC2016 # the $(...) is text for the reader to run
	printf '%s\n' 'usage: bake-entrypoint COMMAND [ARG...]   serve the baked assets, then exec COMMAND' \
		'       bake-entrypoint --print-env        serve them, print export lines (runners:' \
		'         bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env")' \
		'       bake-entrypoint                    serve them, run nothing' \
		'       bake-entrypoint --help | --version'
	[ -n "${1:-}" ] || return 0
	printf '%s\n' '' 'Environment (flags take 1/true/yes/on or 0/false/no/off):' \
		'  BAKE_ASSETS=DIR  the baked asset directory (default /opt/bake/assets)' \
		'  BAKE_VERIFY=1    hash every baked file first, and what each location serves' \
		'  BAKE_REQUIRE=1   exit 6 when a location cannot serve its baked files' \
		'  BAKE_QUIET=1     no ready line' \
		'  BAKE_SEED=0      never copy into node storage (a volume, a persistent cache)' \
		'  BAKE_OFFLINE=1   export each fully served consumer'"'"'s own offline switch' \
		'' 'Exit codes before the job starts: 0 served (or nothing to run), 2 bad usage or flag,' \
		'  3 a file failed verification (BAKE_VERIFY=1), 6 a location not served (BAKE_REQUIRE=1);' \
		'  128+N a signal N ended the start. Then the job'"'"'s own, by exec.' \
		'' "bake-entrypoint $_VERSION; docs/runtime.md"
}

_parse_args() { # "$@": sets _mode (_main's) to run or env; exits for --help, --version and bad usage
	_mode=run
	case ${1:-} in
	--print-env)
		[ $# -eq 1 ] || { _say "error: --print-env takes no command, saw '$2'; run the command after the runner line: bake_env=\$(bake-entrypoint --print-env) || exit; eval \"\$bake_env\"" && exit 2; }
		_mode="env"
		;;
	-h | --help) _usage full && exit 0 ;;
	--version) printf '%s\n' "bake-entrypoint $_VERSION" && exit 0 ;;
	-*)
		_say "error: unknown option '$1': expected --print-env, --help, --version or a command (exec cannot take one that starts with -); run it through sh -c" && _usage >&2 && exit 2
		;;
	esac
}

# --- the head of bake.serve, as it reads: _head, a checked record a line, fields joined by _us
_plain_path() { # $1: succeed when it is relative path components, none empty, . or ..
	case /$1/ in
	// | *//* | */./* | */../*) return 1 ;;
	esac
}

_find() { # $1 kind, $2 its first field (an ID or a consumer): sets _record to that head record, or fails
	local IFS="$_nl" record
	for record in $_head; do
		case $record in "$1$_us$2$_us"*) _record=$record && return 0 ;; esac
	done
	return 1
}

_set_of() { # $1 consumer: sets _set to its set record's fields after the consumer (DIGEST BYTES STATE ROOT SHOWN); fails without one
	local _record
	_find set "$1" || return 1
	_set=${_record#"set$_us$1$_us"}
}

_records() { # $1 kind (dir, place or skip), $2 consumer: sets _recs to the fields after the consumer of each, a line each
	local IFS="$_nl" record
	_recs=''
	for record in $_head; do
		case $record in "$1$_us$2$_us"*) _recs=$_recs${record#"$1$_us$2$_us"}$_nl ;; esac
	done
}

_state_of() { # $1 consumer: sets _state to bake's state directory in its locations (.bake, .locks/.bake)
	local _set
	_set_of "$1" || return 1
	_state=${_set#*"$_us"*"$_us"}
	_state=${_state%%"$_us"*}
}

_unsafe_var() { # $1 a variable name: succeed when a location may not name it (servefile.REFUSED): malformed, or read by a shell, the loader or libc to decide what runs
	case $1 in
	'' | [!A-Za-z_]* | *[!A-Za-z0-9_]* | PATH | IFS | ENV | BASH_* | BASHOPTS | SHELLOPTS | \
		POSIXLY_CORRECT | EXECIGNORE | GLOBIGNORE | FUNCNEST | FCEDIT | PROMPT_COMMAND | PS0 | PS1 | \
		PS2 | PS3 | PS4 | OPTIND | TMOUT | CDPATH | PWD | OLDPWD | HOME | SHELL | _ | TMPDIR | LD_* | \
		GCONV_PATH | GETCONF_DIR | GLIBC_TUNABLES | HOSTALIASES | LOCALDOMAIN | LOCPATH | MUSL_LOCPATH | \
		MALLOC_* | NIS_PATH | NLSPATH | RESOLV_HOST_CONF | RES_OPTIONS | TZDIR | PYTHON* | PERL5* | \
		RUBY* | NODE_* | JAVA_TOOL_OPTIONS | BAKE_*) return 0 ;;
	esac
	return 1
}

_load_loc() { # loc ID CONSUMER MODE VAR SUB FALLBACK: what guards this script: an ID its tally can hold, a variable it may eval, plain paths; or set _reason and fail
	case $2 in '' | *[!A-Za-z0-9_.-]*) _reason="an ID of letters, digits, _ . -, saw '$2'" && return 1 ;; esac
	if _unsafe_var "$5"; then
		_reason="a variable name other than PATH, IFS, ENV, BASH_*, BASHOPTS, SHELLOPTS, POSIXLY_CORRECT, EXECIGNORE, GLOBIGNORE, FUNCNEST, FCEDIT, PROMPT_COMMAND, PS0, PS1, PS2, PS3, PS4, OPTIND, TMOUT, CDPATH, PWD, OLDPWD, HOME, SHELL, _, TMPDIR, LD_*, GCONV_PATH, GETCONF_DIR, GLIBC_TUNABLES, HOSTALIASES, LOCALDOMAIN, LOCPATH, MUSL_LOCPATH, MALLOC_*, NIS_PATH, NLSPATH, RESOLV_HOST_CONF, RES_OPTIONS, TZDIR, PYTHON*, PERL5*, RUBY*, NODE_*, JAVA_TOOL_OPTIONS and BAKE_*, saw '$5'"
		return 1
	fi
	[ -z "$6" ] || _plain_path "$6" || { _reason="SUB as plain relative components, saw '$6'" && return 1; }
	# An @ID names an earlier loc, so that resolving a chain always ends.
	case $7 in
	'' | \$HOME | /) return 0 ;;
	@*) _find loc "${7#@}" && return 0 ;;
	\$HOME/* | /*) _plain_path "${7#*/}" && return 0 ;;
	esac
	_reason="FALLBACK /PATH, \$HOME[/PATH] or an earlier @ID, saw '$7'"
	return 1
}

_load_set() { # set CONSUMER DIGEST BYTES STATE ROOT SHOWN: the fields that name a file, or set _reason and fail
	case $3 in *[!0-9a-f]* | '') false ;; *) [ "${#3}" -eq 64 ] ;; esac ||
		{ _reason="DIGEST as 64 lower-case hex characters, saw '$3'" && return 1; } # a stamp's name
	case $4 in *[!0-9]* | '') _reason="BYTES as decimal digits, saw '$4'" && return 1 ;; esac
	_plain_path "$5" || { _reason="STATE as plain components, the first hidden (.NAME), saw '$5'" && return 1; }
	_plain_path "$6" || { _reason="ROOT as a path inside BAKE_ASSETS, saw '$6'" && return 1; }
}

_split_tabs() { # $1 line: sets _fields to its tab-separated fields joined by the unit separator, empty ones kept
	local rest="$1$_tab" IFS=$_us
	# One tab at a time: splitting at IFS white space would drop an empty field, shifting the rest.
	set --
	while [ -n "$rest" ]; do
		set -- "$@" "${rest%%"$_tab"*}"
		rest=${rest#*"$_tab"}
	done
	_fields="$*"
}

_load_record() { # $1 line: check what guards this script's evals and paths, add it to _head; set _reason and fail if not
	local _fields IFS
	case $1 in *"$_us"*) _reason="fields without control characters" && return 1 ;; esac # what _head's fields are joined by
	_split_tabs "$1"
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $_fields '' '' '' '' '' '' # the fields a short record lacks read as empty
	# The rest of the format's rules are Python's: `bake seal` refuses whatever its reader would.
	case $1 in
	loc) _load_loc "$@" ;;
	set) _load_set "$@" ;;
	dir) [ "$4" = . ] || _plain_path "$4" || { _reason="PATH as . or plain relative components, saw '$4'" && return 1; } ;;
	place)
		_plain_path "$4" || { _reason="SOURCE as a path inside BAKE_ASSETS, saw '$4'" && return 1; }
		[ "$5" = . ] || _plain_path "$5" || { _reason="DEST as . or a path inside the location, saw '$5'" && return 1; }
		;;
	skip) _plain_path "$3" || { _reason="NAME as a path inside the location, saw '$3'" && return 1; } ;;
	*) return 0 ;; # a kind no one reads here
	esac || return 1
	_head=$_head$_fields$_nl
}

_load_serve() { # read the head of $_assets/bake.serve into _head; fails (with _reason) when it is missing or not v1
	local line number=0 _record
	_head=''
	_reason="nothing there"
	[ ! -d "$_assets" ] || _reason="a directory without a readable bake.serve"
	[ -r "$_assets/bake.serve" ] && [ ! -d "$_assets/bake.serve" ] || return 1
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		if [ "$number" -eq 1 ]; then
			[ "$line" = '# bake serve v1' ] || { _reason="a bake.serve whose first line is not '# bake serve v1'" && return 1; }
			continue
		fi
		case $line in
		'' | '#'*) continue ;;
		file | link | file"$_tab"* | link"$_tab"*) break ;; # the per-file records: Python's to read
		esac
		_load_record "$line" || _bad_line "$number" "$_reason"
	done <"$_assets/bake.serve"
	[ "$number" -gt 0 ] || { _reason="an empty bake.serve" && return 1; }
}

_bad_line() { # $1 line number, $2 the rule its record breaks: one problem
	_problem "$_assets/bake.serve line $1" "$2" "a line this entrypoint cannot read, skipped" \
		"rebuild the image with the bake that wrote it, or use that bake's entrypoint"
}

# --- where a location is
_find_home() { # sets _home from HOME, else from the password database; empty if neither knows
	local entry user dir uid
	_home=${HOME:-}
	[ -z "$_home" ] || return 0
	uid=$(id -u)
	if command -v getent >/dev/null 2>&1; then
		entry=$(getent passwd "$uid" 2>/dev/null) || entry=
		entry=${entry#*:*:*:*:*:}
		_home=${entry%%:*}
	elif [ -r /etc/passwd ]; then
		while IFS=: read -r _ _ user _ _ dir _; do
			[ "$user" != "$uid" ] || { _home=$dir && break; }
		done </etc/passwd
	fi
}

_export() { # $1 name, $2 value: export for the job and remember it for --print-env
	eval "$1=\$2"
	export "${1?}"
	case " $_exports " in *" $1 "*) ;; *) _exports="$_exports $1" ;; esac
}

_resolve() { # $1 loc ID: sets _resolved to its directory, absolute; empty when it has none
	local var sub fallback value set IFS _record _home
	_find loc "$1" || return 0
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $_record # loc ID CONSUMER MODE VAR SUB FALLBACK
	unset IFS
	var=$5 sub=${6:-} fallback=${7:-}
	eval "value=\${$var:-} set=\${$var+set}"
	if [ -z "$value" ]; then
		case $fallback in
		@*) _resolve "${fallback#@}" && value=$_resolved ;;
		\$HOME*) _find_home && value=${_home:+$_home${fallback#\$HOME}} ;;
		?*) value=$fallback ;;
		esac
		# Set but empty, os.getenv(VAR, DEFAULT) reads the working directory: export what is served.
		if [ -n "$set" ] && [ -n "$value" ]; then _export "$var" "$value"; fi
	fi
	case $value in
	'') ;;
	/*) value=$value${sub:+/$sub} ;;
	*) value=$PWD/$value${sub:+/$sub} ;;
	esac
	_resolved=$value
}

_mount_id() { # $1 directory: sets _mnt to the id of the mount it is on, from /proc without a process; empty if unknown
	local key value
	_mnt=''
	# Opened as DIR/. : a FIFO or device there fails (ENOTDIR), never opened, never blocking.
	{
		while IFS=: read -r key value; do
			[ "$key" != mnt_id ] || { _mnt=${value#"$_tab"} && break; }
		done </proc/self/fdinfo/8
	} 2>/dev/null 8<"$1/." || _mnt=''
}

_fs_kind() { # $1 existing path: sets _kind to own (the container's own filesystem), tmpfs or node
	local devices type _mnt
	_kind=node # what stat cannot answer counts as node storage: a copy is safe anywhere, a link is not
	# On the mount / is on: own, with no process; another mount, by its device and type (stat).
	[ -n "$_root_mnt" ] || { _mount_id / && _root_mnt=${_mnt:--}; }
	_mount_id "$1"
	[ -z "$_mnt" ] || [ "$_mnt" != "$_root_mnt" ] || { _kind=own && return 0; }
	devices=$(stat -L -c %d / "$1" 2>/dev/null) || return 0
	[ "${devices%"$_nl"*}" != "${devices#*"$_nl"}" ] || { _kind=own && return 0; }
	type=$(stat -f -L -c %t "$1" 2>/dev/null) || return 0
	# tmpfs and ramfs are job-local: never copy hundreds of MiB into memory.
	case $type in 1021994 | 01021994 | 858458f6) _kind=tmpfs ;; esac
}

# --- job-local directories: ${TMPDIR:-/tmp}/bake-VAR.*
_tmp() { # sets _tmpdir to ${TMPDIR:-/tmp}, absolute
	_tmpdir=${TMPDIR:-/tmp}
	case $_tmpdir in /*) ;; *) _tmpdir=$PWD/$_tmpdir ;; esac
}

_was_job_local() { # $1 directory: succeed when an entrypoint made it job-local: ${TMPDIR:-/tmp}/bake-VAR.*
	local name _tmpdir
	_tmp
	case $1 in "$_tmpdir"/bake-*) ;; *) return 1 ;; esac
	name=${1#"$_tmpdir"/}
	case $name in */* | *[!A-Za-z0-9_.-]*) return 1 ;; esac # a job-local directory itself, by its own name
}

_is_job_local() { # $1 path: succeed when it is in a job-local directory of this job, through no link
	local name part entry IFS _tmpdir
	_tmp
	case $1 in "$_tmpdir"/bake-*) ;; *) return 1 ;; esac
	name=${1#"$_tmpdir"/}
	# Their names (bake-VAR.SUFFIX) hold no newline, whatever TMPDIR holds.
	case $_nl$_jobnames in *"$_nl${name%%/*}$_nl"*) ;; *) return 1 ;; esac
	# A path through a link of a re-pointed variable's view is that directory's, never job-local.
	part=$_tmpdir/${name%%/*}
	[ "$name" != "${name#*/}" ] || return 0
	IFS=/
	for entry in ${name#*/}; do
		part=$part/$entry
		[ ! -L "$part" ] || return 1
	done
}

_job_dir() { # $1 variable, $2 an image directory to make it of (a link to each entry), or empty: sets _made to a fresh private directory for it under ${TMPDIR:-/tmp}
	local count=1 name IFS="$_nl" _tmpdir
	_tmp
	# A runner may make its TMPDIR only after this runs (vLLM's docker path does): made as its mkdir -p would.
	[ -d "$_tmpdir" ] || mkdir -p -- "$_tmpdir" 2>/dev/null || :
	for name in $_jobnames; do count=$((count + 1)); done
	_made=$_tmpdir/bake-$1.$$.$count
	# A new entry (mkdir never follows a link at its name), made with its links by one cp where there
	# is an image directory (umask 077: mkdir's 0700); a name taken (this pid's in another container
	# sharing TMPDIR, or between the look and cp's mkdir) falls to mktemp.
	# shellcheck disable=SC3067 # test -O is in dash, busybox ash and bash alike
	{ [ -n "${2:-}" ] && [ ! -e "$_made" ] && [ ! -L "$_made" ] && _link_copy "$2" "$_made" 077 &&
		[ -d "$_made" ] && [ ! -L "$_made" ] && [ -O "$_made" ]; } || mkdir -m 0700 -- "$_made" 2>/dev/null ||
		_made=$(mktemp -d "$_tmpdir/bake-$1.XXXXXX" 2>/dev/null) || _made=
	[ -n "$_made" ] && [ -d "$_made" ] || return 1
	_jobnames=$_jobnames${_made##*/}$_nl
}

# --- proving a location served: its stamp
_state_ok() { # $1 directory, $2 state: succeed when bake's state directory is there, real all the way
	local part='' entry IFS=/
	for entry in $2; do
		part=$part/$entry
		[ -d "$1$part" ] && [ ! -L "$1$part" ] || return 1
	done
}

_dir_stats() { # $1 directory, $2 consumer, $3 view: sets _stats to each directory of the view, as `stat` sees it now
	local dir="$1" view="$3" entry IFS _recs
	_records dir "$2"
	set --
	IFS=$_nl
	for entry in $_recs; do
		[ "$view" = copied ] || [ "${entry%%"$_us"*}" = both ] || continue
		set -- "$@" "$dir/${entry#*"$_us"}"
	done
	# Inode, mtime and ctime to the nanosecond (GNU and busybox stat alike): an entry added, removed or
	# renamed moves both times, a copied tree has other inodes; compared for equality, whatever the clock.
	_stats=$(stat -c '%i %y %z' -- "$@" 2>/dev/null) || _stats=''
}

_stamped() { # $1 directory, $2 consumer: succeed when its stamp (bake seed's, or this script's) recorded every directory of the view as it is now
	local dir="$1" stamp view root line recorded='' _set _state _stats
	_state_of "$2" && _state_ok "$dir" "$_state" || return 1
	_set_of "$2"
	stamp=$dir/$_state/served.${_set%%"$_us"*}
	for view in linked copied ''; do
		[ -n "$view" ] || return 1
		[ ! -f "$stamp.$view" ] || [ -L "$stamp.$view" ] || break
	done
	{
		IFS= read -r root || return 1
		while IFS= read -r line; do recorded=$recorded$line$_nl; done
	} 2>/dev/null <"$stamp.$view" || return 1
	[ "$view" = copied ] || [ "$root" = "$_assets" ] || return 1
	_dir_stats "$dir" "$2" "$view"
	[ -n "$_stats" ] && [ "$recorded" = "$_stats$_nl" ]
}

_stamp() { # $1 directory, $2 consumer, $3 the directories' stat lines recorded before the proof: stamp the linked view
	local stamp temp _set _state
	_state_of "$2" && _state_ok "$1" "$_state" && [ -n "$3" ] || return 0
	_set_of "$2"
	stamp=$1/$_state/served.${_set%%"$_us"*}.linked
	temp=$1/$_state/.served.$$
	[ ! -L "$stamp" ] && { [ -f "$stamp" ] || [ ! -e "$stamp" ]; } || return 0
	# A builtin write, created with O_EXCL (noclobber: nothing there), 0644 for every job's user.
	set -C
	{ printf '%s\n' "$_assets" "$3" >"$temp"; } 2>/dev/null || temp=''
	set +C
	[ -z "$temp" ] || mv -f -T -- "$temp" "$stamp" 2>/dev/null || rm -f -- "$temp" 2>/dev/null || :
}

# --- bake's Python: bake seed, next to this script or on PATH
_find_bake() { # succeed when a bake can be run: sets _bake (the run's) to it, once
	case $_bake in -) return 1 ;; ?*) return 0 ;; esac
	case $0 in */*) if [ -f "${0%/*}/bake" ] && [ -x "${0%/*}/bake" ]; then _bake=${0%/*}/bake && return 0; fi ;; esac
	_bake=$(command -v bake 2>/dev/null) || _bake=-
	case $_bake in /*) ;; *) _bake=- && return 1 ;; esac
}

_bake_seed() { # $1 location, $2 consumer, then bake seed's options: sets _line to its result line; returns its status
	local dir="$1" consumer="$2" status=0 first
	shift 2
	_line=''
	_find_bake || return 127
	# exec: bake is this shell's own child, so that it dies with it (PR_SET_PDEATHSIG), killed by pid alone.
	_line=$(exec "$_bake" seed --assets "$_assets" --consumer "$consumer" "$@" -- "$dir") || status=$?
	_signalled "$status"
	# Before its line, bake names each per-file line of bake.serve its reader refused: each once a start.
	while :; do
		case $_line in "refused$_tab"*"$_nl"*) ;; *) return "$status" ;; esac
		first=${_line%%"$_nl"*} _line=${_line#*"$_nl"}
		first=${first#refused"$_tab"}
		case $_nl$_reported in *"$_nl${first%%"$_tab"*}$_nl"*) continue ;; esac
		_reported=$_reported${first%%"$_tab"*}$_nl
		_bad_line "${first%%"$_tab"*}" "${first#*"$_tab"}"
	done
}

_signalled() { # $1 a status: a signal that ended bake seed ends this start too
	[ "$1" -le 128 ] || [ "$1" -eq 255 ] || exit "$1"
}

_proved() { # $1 directory, $2 consumer, $3 --verify or empty: succeed when bake seed proves its linked view file by file (and hashes it: exit 3 where that fails)
	local _line status=0
	_bake_seed "$1" "$2" --linked ${3:+"$3"} || status=$?
	[ "$status" -ne 0 ] || return 0
	[ "$status" -ne 6 ] || _reason=${_line#served job-local: } # what is not served
	[ "$status" -ne 127 ] || _reason="no bake next to bake-entrypoint or on PATH to prove it file by file"
	[ -n "$3" ] || return 1
	[ "$status" -eq 3 ] || _say "error: BAKE_VERIFY=1: $1: expected bake seed to hash what it serves, saw ${_line:-exit $status, and no bake next to bake-entrypoint or on PATH}; install bake, or unset BAKE_VERIFY; job not started"
	exit 3
}

# --- the linked view: links into the image, in a constant number of processes
_mkdirs() { # $1 directory, $2 consumer, $3 1 for bake's state too: each directory the linked view has
	local dir="$1" entry IFS _recs _state
	_records dir "$2"
	_state_of "$2"
	if [ -n "$3" ] && [ ! -d "$dir/$_state" ]; then set -- "$dir/$_state"; else set --; fi
	IFS=$_nl
	for entry in $_recs; do
		[ "${entry%%"$_us"*}" = both ] || continue
		[ -d "$dir/${entry#*"$_us"}" ] || set -- "$@" "$dir/${entry#*"$_us"}"
	done
	[ $# -eq 0 ] || mkdir -p -- "$@" 2>/dev/null || :
}

_one_source() { # $1 consumer, $2 1 to allow alias links: sets _source to the one image directory whose every file its placements link, each by its own name; fails if there is none
	local aliases="$2" entry count=0 IFS _recs
	_source=''
	_records skip "$1"
	[ -z "$_recs" ] || return 1
	_records place "$1"
	IFS=$_nl
	for entry in $_recs; do
		IFS=$_us
		# shellcheck disable=SC2086 # HOW SOURCE DEST, split at IFS, with set -f on
		set -- $entry
		IFS=$_nl
		[ "$1" = link ] && [ "$3" = "${2##*/}" ] && [ "${_source:=$_assets/${2%/*}}" = "$_assets/${2%/*}" ] &&
			[ -f "$_assets/$2" ] && [ ! -L "$_assets/$2" ] || return 1
		count=$((count + 1))
	done
	[ -n "$_source" ] || return 1
	# And the directory holds no other file: each entry is placed, or an alias link where allowed.
	set +f
	set -- "$_source"/* "$_source"/.[!.]* "$_source"/..?*
	set -f
	for entry; do
		{ [ -e "$entry" ] || [ -L "$entry" ]; } || continue # an unmatched glob
		case $_nl$_recs in
		*"$_us${entry#"$_assets"/}$_us"*) count=$((count - 1)) ;;
		*) [ -n "$aliases" ] && [ -L "$entry" ] || return 1 ;;
		esac
	done
	[ "$count" -eq 0 ]
}

_link_copy() { # $1 an image directory, $2 a directory to make, $3 a umask for it or empty: make it, a link to each entry of $1, in one cp; fails where cp cannot
	[ -z "$_cp_rs_failed" ] || return 1
	# mkdir, then `ln -s` per entry, in one process: --no-preserve=mode gives mkdir's mode.
	(
		[ -z "$3" ] || umask "$3"
		exec cp -r -s -T --no-preserve=mode -- "$1" "$2"
	) 2>/dev/null && return 0
	_cp_rs_failed=1 # busybox's cp has no --no-preserve: mkdir and ln from now on, a failing cp once
	return 1
}

_linked_new() { # $1 a directory to make, whose parent exists, $2 consumer: make it and its links in one cp where its placements are one directory's every file
	local _source
	[ -z "$_cp_rs_failed" ] && _one_source "$2" '' && _link_copy "$_source" "$1" ''
}

_in_place() { # $1 directory, $2 consumer, $3 `one` for one link only: succeed when its placements (no tree) are all there, or with `one` when one of its links is (bake made the directory); no process started
	local dir="$1" one="${3:-}" entry IFS="$_nl" _recs
	_records place "$2"
	case $one$_nl$_recs in "$_nl"*) case $_nl$_recs in *"${_nl}tree$_us"*) return 1 ;; esac ;; esac
	for entry in $_recs; do
		IFS=$_us
		# shellcheck disable=SC2086 # HOW SOURCE DEST, split at IFS, with set -f on
		set -- $entry
		IFS=$_nl
		# A link into the image (the same file), or the copy a consumer may have rewritten since.
		if [ "$1" = link ] && [ -L "$dir/$3" ] && [ "$dir/$3" -ef "$_assets/$2" ]; then
			[ -z "$one" ] || return 0
		elif [ "$1" = link ] || { [ "$1" = copy ] && [ ! -f "$dir/$3" ]; }; then
			[ -n "$one" ] || return 1
		fi
	done
	[ -z "$one" ]
}

_place() { # $1 directory, $2 consumer: make every placement; succeed when each made all it had to
	local dir="$1" consumer="$2" entry batch='' links='' all=0 IFS="$_nl" _recs
	_records place "$consumer"
	for entry in $_recs; do
		IFS=$_us
		# shellcheck disable=SC2086 # HOW SOURCE DEST, split at IFS, with set -f on
		set -- $entry
		IFS=$_nl
		set -- "$1" "$_assets/$2" "$dir/$3" # HOW, the file in the image, where it is placed
		if [ "$1" = link ] && { [ -e "$3" ] || [ -L "$3" ]; }; then
			[ "$3" -ef "$2" ] || all=1
		elif [ ! -e "$2" ]; then
			all=1 _reason="$2, a baked file, missing from the image" # never a dangling link
		elif [ "$1" = link ] && [ "${3##*/}" = "${2##*/}" ]; then
			# One ln per directory: `ln -s A B DIR/` names each link after its target.
			[ "${3%/*}" = "$batch" ] || { _ln_batch "$batch" "$links" || all=1; }
			[ "${3%/*}" = "$batch" ] || links='' batch=${3%/*}
			links=$links$2$_nl
		elif [ "$1" = link ]; then
			ln -s -T -- "$2" "$3" 2>/dev/null || all=1
		elif [ "$1" = tree ]; then
			cp -r -s -T -- "$2" "$3" 2>/dev/null || all=1
		elif [ ! -e "$3" ] && [ ! -L "$3" ]; then
			cp -- "$2" "$3" 2>/dev/null || all=1
		fi
	done
	_ln_batch "$batch" "$links" || all=1
	_records skip "$consumer"
	set --
	for entry in $_recs; do
		[ ! -L "$dir/$entry" ] || set -- "$@" "$dir/$entry"
	done
	[ $# -eq 0 ] || rm -f -- "$@" 2>/dev/null || all=1
	return "$all"
}

_ln_batch() { # $1 a directory, $2 image files, a line each: one ln for all of them
	local IFS="$_nl"
	[ -n "$2" ] || return 0
	# shellcheck disable=SC2086 # the files, split at newlines, with set -f on
	ln -s -- $2 "$1/" 2>/dev/null
}

_linked() { # $1 directory, $2 consumer, $3 1 for a fresh job-local one: serve the linked view; returns a status
	local dir="$1" tree='' marked='' stats='' _state _stats _recs
	_state_of "$2"
	_records place "$2"
	case $_nl$_recs in *"${_nl}tree$_us"*) tree=1 ;; esac
	# A whole tree (not job-local) gets bake's marker and stamp; a few links prove themselves.
	[ -z "$tree" ] || [ -n "$3" ] || marked=1
	if [ -z "$marked" ] || [ ! -f "$dir/$_state/links" ]; then
		# The marker first: a job starting beside this one sees a directory bake makes.
		_mkdirs "$dir" "$2" "$marked"
		[ -z "$marked" ] || printf '' 2>/dev/null >>"$dir/$_state/links" || :
		# Every link made is its own proof; but cp -rs links only what the image has: BAKE_REQUIRE=1 proves it.
		if _place "$dir" "$2" && { [ -z "$_require" ] || [ -z "$tree" ]; }; then
			[ -z "$marked" ] || { _dir_stats "$dir" "$2" linked && _stamp "$dir" "$2" "$_stats"; }
			return "$_SERVED"
		fi
	fi
	# Proved file by file (bake seed --linked), the directories recorded first for the stamp.
	[ -z "$marked" ] || { _dir_stats "$dir" "$2" linked && stats=$_stats; }
	if _proved "$dir" "$2" "" || { _place "$dir" "$2" && _proved "$dir" "$2" ""; }; then
		[ -z "$marked" ] || _stamp "$dir" "$2" "$stats"
		return "$_SERVED"
	fi
	if [ -n "$3" ]; then
		_reason="a job-local directory that could not be filled (${_reason:-no space in ${TMPDIR:-/tmp}?})"
	else
		_reason="a location that could not be created or written (${_reason:-read-only, or no permission})"
	fi
	return "$_CANNOT_MAKE"
}

_empty() { # $1 directory, $2 state: succeed when it holds nothing but bake's own directory
	local state="$2" entry
	set +f
	set -- "$1"/* "$1"/.[!.]* "$1"/..?*
	set -f
	for entry; do
		{ [ -e "$entry" ] || [ -L "$entry" ]; } || continue # an unmatched glob
		[ "${entry##*/}" = "${state%%/*}" ] || return 1
	done
}

# --- node storage: bake seed's, through its exit status and its one line
_copied() { # $1 directory, $2 consumer: serve the copied view through bake seed; returns a status, the reason in _reason
	local status=0 _line
	set -- "$1" "$2"
	[ -n "$_seed" ] || set -- "$@" --no-copy
	[ -z "$_verify" ] || set -- "$@" --verify
	_bake_seed "$@" || status=$?
	_reason=${_line#*: }
	case $status:$_line in
	0:"served: "*) _notes="$_notes${_reason:+; $_reason}" && return "$_SERVED" ;;
	6:"served job-local: "*) return "$_MOVE" ;;
	6:"left as is: "*) ;;
	3:"left as is: "*) [ -z "$_verify" ] || { _say "error: BAKE_VERIFY=1: $1: $_reason; job not started" && exit 3; } ;;
	3:*) exit 3 ;; # BAKE_VERIFY=1: bake seed named the file that does not hash as baked
	127:*) _reason="node storage, left as is: no bake next to bake-entrypoint or on PATH to copy into it safely (install bake)" ;;
	*) _reason="node storage, left as is: bake seed could not run there (exit $status, see above)" ;;
	esac
	return "$_KEEP"
}

# --- serving a location
_make_location() { # $1 a missing directory (or a dangling link), $2 consumer: make it as the job's own mkdir -p would; sets _kind to what its parent is on; returns _SERVED when made whole with its links, 5 when made, else a status
	local dir="$1" up='' _mnt
	_kind=''
	if [ -L "$dir" ] && [ ! -e "$dir" ]; then
		# A dangling link: replaced on our own filesystem, never in node storage.
		_fs_kind "${dir%/*}/"
		[ "$_kind" != node ] || { _reason="node storage where $dir is a dangling link, which is never changed" && return "$_KEEP"; }
		rm -f -- "$dir" 2>/dev/null || :
	elif [ ! -e "$dir" ]; then
		up=${dir%/*}
		while [ -n "$up" ] && [ ! -e "$up" ] && [ ! -L "$up" ]; do up=${up%/*}; done
		[ -d "${up:-/}" ] || return "$_CANNOT_MAKE"
		_fs_kind "${up:-/}"
		[ "$_kind" != node ] || [ -n "$_seed" ] || { _reason="node storage, left as is under BAKE_SEED=0" && return "$_KEEP"; }
	fi
	if [ "$_kind" != node ] && [ "$up" = "${dir%/*}" ] && _linked_new "$dir" "$2"; then return "$_SERVED"; fi
	# mkdir -p, then a look: a concurrent job's mkdir is no failure (no check-then-act gap).
	mkdir -p -- "$dir" 2>/dev/null || :
	[ -d "$dir" ] && return 5
	[ -e "$dir" ] && return "$_NOT_A_DIR"
	return "$_CANNOT_MAKE"
}

_where() { # $1 directory, $2 consumer: make it where that is ours to do; sets _view (linked, copied, or made: served); returns a status if not
	local dir="$1" status=5 _kind='' _state
	if [ ! -d "$dir" ]; then _make_location "$dir" "$2" && status=0 || status=$?; fi
	case $status in 0) _view=made && return 0 ;; 5) ;; *) return "$status" ;; esac
	[ -n "$_kind" ] || _fs_kind "$dir"
	_view=copied
	_state_of "$2"
	case $_kind in
	tmpfs) _view=linked ;;
	own)
		if [ -f "$dir/$_state/links" ] || _was_job_local "$dir" || _in_place "$dir" "$2" one || _empty "$dir" "$_state"; then
			_view=linked
		fi
		;;
	esac
}

_serve_at() { # $1 directory, $2 consumer: serve its files there; returns a status above, the reason in _reason
	local _view
	if [ -z "$_verify" ] && { _in_place "$1" "$2" || _stamped "$1" "$2"; }; then return "$_SERVED"; fi
	if _is_job_local "$1"; then
		_linked "$1" "$2" 1
		return
	fi
	_where "$1" "$2" || return
	[ "$_view" != made ] || return "$_SERVED"
	[ "$_view" != copied ] || {
		_copied "$1" "$2"
		return
	}
	_linked "$1" "$2" '' || return
	# Under BAKE_VERIFY=1, hashed as the copied view is: a same-size file may sit beside the links.
	[ -z "$_verify" ] || _proved "$1" "$2" --verify
}

_problem() { # $1 location, $2 expected, $3 seen, $4 what to do: one warning (error under BAKE_REQUIRE)
	local kind=warning
	_unserved=$((_unserved + 1))
	[ -z "$_require" ] || kind=error
	_say "$kind: $1: expected $2, saw $3; $4"
}

_wanted() { # $1 consumer: sets _want to what a location of it should be, as messages say it
	local _set
	_set_of "$1"
	_set=${_set##*"$_us"}
	_want="a directory serving $1's ${_set:-files} from $_assets"
}

_view() { # $1 variable, $2 the directory it named, $3 SUB or empty, $4 consumer: sets _made to a job-local view of it (bake seed --view), or a fresh job-local directory where it holds nothing to keep in view
	local status=0 _line _tmpdir
	_made=''
	if [ ! -d "$2" ] || _empty "$2" ''; then
		_job_dir "$1" || return 1
	elif ! _find_bake; then
		_say "warning: $2: its other entries are not in view of the job-local \$$1 (no bake next to bake-entrypoint or on PATH to make a view of it); install bake"
		_job_dir "$1" || return 1
	else
		_tmp
		_bake_seed "$2" "$4" --view "$_tmpdir" --var "$1" --sub "$3" || status=$?
		case $status:$_line in 0:"view: "/*) _made=${_line#view: } ;; *) return 1 ;; esac
		_jobnames=$_jobnames${_made##*/}$_nl
	fi
	[ -z "$3" ] || mkdir -p -- "$_made/$3" 2>/dev/null
}

_merged() { # $1 variable, $2 node directory or empty, $3 consumer: sets _made to a job-local directory serving both; fails with _reason
	local _source
	_reason="no job-local directory under ${TMPDIR:-/tmp}"
	# With nothing to keep in view, one cp of the consumer's image directory as links, aliases too.
	if [ ! -d "${2:-}" ] && _one_source "$3" 1; then
		_job_dir "$1" "$_source" || return 1
	else
		_view "$1" "${2:-}" '' "$3" || return 1
	fi
	_reason=''
	_linked "$_made" "$3" 1 >/dev/null
}

_uses() { # $1 loc ID, $2 variable: succeed when the loc, or a FALLBACK it names, is resolved through it
	local var="$2" IFS _record
	_find loc "$1" || return 1
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $_record # loc ID CONSUMER MODE VAR SUB FALLBACK
	unset IFS
	[ "$5" != "$var" ] || return 0
	case ${7:-} in @*) _uses "${7#@}" "$var" ;; *) return 1 ;; esac
}

_tally_of() { # $1 loc ID: sets _n to the problems last counted at it
	local IFS="$_nl" entry
	_n=0
	for entry in $_tally; do
		case $entry in "$1 "*) _n=${entry#* } ;; esac
	done
}

_moved() { # $1 variable just exported, $2 the loc ID that did: serve again each earlier loc that looks through it
	local var="$1" last="$2" IFS="$_nl" record _record _n
	for record in $_head; do
		case $record in "loc$_us$last$_us"*) return 0 ;; "loc$_us"*) ;; *) continue ;; esac
		IFS=$_us
		# shellcheck disable=SC2086 # split at IFS, with set -f on
		set -- $record # loc ID CONSUMER ...
		IFS=$_nl
		if [ "$3" != - ] && _find set "$3" && _uses "$2" "$var"; then
			# Reported where it was; what counts now is where its consumer looks.
			_tally_of "$2"
			_unserved=$((_unserved - _n))
			_serve_loc "$2"
		fi
	done
}

_serve_export() { # $1 variable, $2 its directory or empty, $3 _serve_at's status, $4 consumer, $5 the reason: job-local for this job
	local var="$1" _made _want _reason
	_wanted "$4"
	if [ "$3" -eq "$_NOT_A_DIR" ]; then
		_problem "$2" "$_want" "a file where a directory belongs, left alone" "remove that file, or unset $var to get a job-local directory"
	elif _merged "$var" "$2" "$4"; then
		_export "$var" "$_made"
		[ -z "$2" ] || _notes="$_notes; $var=$_made (job-local, $2 left as is: $5)"
	else
		_problem "${2:-\$$var (unset)}" "$_want" "${2:+$5, and }$_reason" \
			"make ${TMPDIR:-/tmp} writable, or point $var at a writable directory"
	fi
}

_serve_under() { # $1 loc ID, $2 its variable, $3 its SUB, $4 its directory or empty, $5 _serve_at's status, $6 consumer, $7 the reason: warn, or go job-local
	local var="$2" where="$4" reason="$7" fix _made _want
	[ -n "$where" ] || where="\${$var:-...}/$3 (no HOME, and no passwd entry for uid $(id -u))"
	case $5 in
	"$_CANNOT_MAKE" | "$_MOVE")
		if ! _is_job_local "$4" && _view "$var" "${4%/"$3"}" "$3" "$6"; then
			_export "$var" "$_made"
			reason=", $where left as is: $reason"
			[ "$5" -ne "$_CANNOT_MAKE" ] || reason=": $where cannot be created"
			_notes="$_notes; $var=$_made (job-local$reason)"
			_serve_loc "$1"
			_moved "$var" "$1"
			return 0
		fi
		reason="a location that could not be created or written (read-only, or no permission)"
		fix="point $var at a writable directory, or make ${TMPDIR:-/tmp} writable"
		;;
	"$_KEEP") fix="let a job copy the files there (BAKE_SEED=1, writable, bake installed), or point $var at an empty or job-local directory" ;;
	*)
		reason="a file where a directory belongs, left alone"
		fix="remove that file, or point $var elsewhere"
		;;
	esac
	_wanted "$6"
	_problem "$where" "$_want" "$reason" "$fix"
}

_serve_loc() { # $1 loc ID: serve it where its consumer looks, or report it
	local id="$1" dir status=0 unserved=$_unserved IFS _record _resolved _reason=''
	_find loc "$id" || return 0
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $_record # loc ID CONSUMER MODE VAR SUB FALLBACK
	unset IFS
	[ "$3" != - ] && _find set "$3" || return 0
	_resolve "$id"
	dir=$_resolved
	if [ -n "$dir" ]; then
		_serve_at "$dir" "$3" || status=$?
		[ "$status" -ne "$_SERVED" ] || return 0
	else
		status=$_CANNOT_MAKE
	fi
	if [ -z "$_reason" ]; then
		_reason="a location that could not be created or written (read-only, or no permission)"
		[ "$status" -ne "$_NOT_A_DIR" ] || _reason="a file where a directory belongs, left alone"
	fi
	if [ "$4" = export ]; then
		_serve_export "$5" "$dir" "$status" "$3" "$_reason"
	else
		_serve_under "$id" "$5" "${6:-}" "$dir" "$status" "$3" "$_reason"
	fi
	_tally="$_tally$id $((_unserved - unserved))$_nl"
}

# --- BAKE_VERIFY: bake seed --verify hashes every baked file against SHA256SUMS first
_verify() { # exit 3 (bake seed having named each file) unless every baked file hashes as SHA256SUMS says
	local status=0
	_find_bake || { _say "error: BAKE_VERIFY=1: expected bake next to bake-entrypoint or on PATH to hash $_assets against its SHA256SUMS, saw none; install bake, or unset BAKE_VERIFY; job not started" && exit 3; }
	(exec "$_bake" seed --assets "$_assets" --verify) || status=$?
	_signalled "$status"
	[ "$status" -eq 0 ] && return 0
	[ "$status" -eq 3 ] || _say "error: BAKE_VERIFY=1: bake seed could not check $_assets (exit $status, see above); job not started"
	exit 3
}

# --- the end of the run
_no_assets() { # $1 mode (run or env), then the command: nothing to serve; warn and run the job, or stop it
	local mode="$1" what="BAKE_ASSETS=$_assets: expected the baked asset directory with its bake.serve, saw $_reason"
	local fix="run the image that bake built, or set BAKE_ASSETS to its asset directory"
	[ -z "$_verify" ] || { _say "error: BAKE_VERIFY=1: nothing to verify: $what; $fix; job not started" && exit 3; }
	[ -z "$_require" ] || { _say "error: BAKE_REQUIRE=1: $what; $fix; job not started" && exit 6; }
	_say "warning: $what; no location served, the job may download; $fix"
	shift
	[ "$mode" = run ] && [ $# -gt 0 ] || exit 0
	exec "$@"
}

_ready() { # $1 the start, in ms, or empty: the ready line, what is served and how long it took
	local start="$1" list='' took='' record IFS="$_nl" _now_ms
	for record in $_head; do
		case $record in "set$_us"*"$_us"?*) list="$list, ${record##*"$_us"}" ;; esac # its SHOWN
	done
	_clock_ms
	if [ -n "$_now_ms" ] && [ -n "$start" ]; then took=" in $((_now_ms - start)) ms"; fi
	if [ "$_unserved" -gt 0 ]; then _notes="$_notes; $_unserved location(s) not served, see above"; fi
	list=${list#, }
	_say "assets ready$took: ${list:-no consumer location to serve}$_notes"
}

_print_env() { # one `export VAR='value'` line per variable set, quoted for eval
	local var value quoted
	for var in $_exports; do
		eval "value=\$$var"
		quoted=
		while :; do
			case $value in *\'*) ;; *) break ;; esac
			quoted="$quoted${value%%\'*}'\\''" value=${value#*\'}
		done
		quoted=$quoted$value
		printf "export %s='%s'\n" "$var" "$quoted"
	done
}

_serve_all() { # serve every loc of bake.serve, in its order
	local record IFS="$_nl"
	for record in $_head; do
		case $record in "loc$_us"*) record=${record#loc"$_us"} && _serve_loc "${record%%"$_us"*}" ;; esac
	done
}

# --- BAKE_OFFLINE=1
_offline_ok() { # $1 consumer, $2 variable, $3 value: succeed for a switch bake.offline may hold (SERVE_FORMAT.md)
	case $1 in '' | [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) return 1 ;; esac
	! _unsafe_var "$2" || return 1
	case $3 in
	@*) case ${3#@} in *[!A-Za-z0-9._/-]*) return 1 ;; esac && _plain_path "${3#@}" ;;
	'' | *[!A-Za-z0-9._-]*) return 1 ;;
	esac
}

_baked_whole() { # $1 consumer: succeed when it has a set record and no location of it went unserved in this start
	local consumer="$1" IFS="$_nl" record _record _n
	_find set "$consumer" || return 1
	for record in $_head; do
		case $record in "loc$_us"*) ;; *) continue ;; esac
		IFS=$_us
		# shellcheck disable=SC2086 # split at IFS, with set -f on
		set -- $record # loc ID CONSUMER ...
		IFS=$_nl
		[ "$3" = "$consumer" ] || continue
		_tally_of "$2"
		[ "$_n" -eq 0 ] || return 1
	done
}

_switch() { # $1 line number, $2 a bake.offline line: export the switch it holds, where its consumer is served whole; sets _switched to the variable
	local consumer var value current
	_switched=''
	consumer=${2%%"$_tab"*} value=${2#*"$_tab"}
	var=${value%%"$_tab"*} value=${value#*"$_tab"}
	if [ "$2" != "$consumer$_tab$var$_tab$value" ] || ! _offline_ok "$consumer" "$var" "$value"; then
		_say "warning: BAKE_OFFLINE=1: $_assets/bake.offline line $1: expected CONSUMER, VAR and VALUE (a word, or @PATH in the asset directory), saw another line; skipped"
		return 0
	fi
	_baked_whole "$consumer" || return 0
	case $value in @*) value=$_assets/${value#@} ;; esac
	eval "current=\${$var:-}"
	if [ -n "$current" ] && [ "$current" != "$value" ]; then
		_say "warning: BAKE_OFFLINE=1: $var='$current' is the job's own and is left as is; offline, $consumer would read $var='$value'"
		return 0
	fi
	_export "$var" "$value"
	_switched=$var
}

_offline() { # export each fully baked consumer's own offline switches, as $_assets/bake.offline lists them
	local file="$_assets/bake.offline" line number=0 exported='' _switched
	if [ ! -f "$file" ] || [ ! -r "$file" ]; then
		_say "warning: BAKE_OFFLINE=1: $file: expected the offline switches bake seal writes, saw no readable file; no switch exported: reseal with this bake"
		return 0
	fi
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		case $number:$line in
		"1:# bake offline v1" | *:'' | *:'#'*) continue ;;
		1:*) _say "warning: BAKE_OFFLINE=1: $file: expected '# bake offline v1' as its first line, saw another; no switch exported" && return 0 ;;
		esac
		_switch "$number" "$line"
		exported="$exported${_switched:+ $_switched}"
	done <"$file"
	[ -z "$exported" ] || _notes="$_notes; offline:$exported"
}

_init() { # the run's state at its start: the flags off but BAKE_SEED, the asset directory from BAKE_ASSETS
	_unserved=0 _notes='' _exports='' _jobnames='' _tally='' _require='' _seed=1 _verify=''
	_root_mnt='' _cp_rs_failed='' _bake='' _reported=''
	_assets=${BAKE_ASSETS:-/opt/bake/assets}
	case $_assets in /*) ;; *) _assets=$PWD/$_assets ;; esac
}

_main() {
	local quiet='' offline='' start='' _now_ms _mode _reason=''
	_init
	if _flag BAKE_QUIET 0; then quiet=1; else _clock_ms && start=$_now_ms; fi
	_parse_args "$@"
	if _flag BAKE_REQUIRE 0; then _require=1; fi
	if ! _flag BAKE_SEED 1; then _seed=''; fi
	if _flag BAKE_VERIFY 0; then _verify=1; fi
	if _flag BAKE_OFFLINE 0; then offline=1; fi
	_load_serve || _no_assets "$_mode" "$@"
	if [ -n "$_verify" ]; then _verify; fi
	_serve_all
	[ -z "$offline" ] || _offline
	if [ "$_unserved" -gt 0 ] && [ -n "$_require" ]; then
		_say "error: BAKE_REQUIRE=1: $_unserved location(s) above cannot serve the baked files from $_assets; fix them or unset BAKE_REQUIRE; job not started"
		exit 6
	fi
	[ -n "$quiet" ] || _ready "$start"
	[ "$_mode" != env ] || { _print_env && return 0; }
	[ $# -gt 0 ] || return 0
	exec "$@"
}

# A test sources this file with _BAKE_SOURCED=1 to call one function (tests/test_entrypoint_functions.py).
[ -n "${_BAKE_SOURCED:-}" ] || _main "$@"

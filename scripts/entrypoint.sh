#!/bin/sh
# shellcheck disable=SC3043 # `local` is in dash, busybox ash and bash: every shell this runs under
# bake-entrypoint: serve the baked assets where each consumer looks for them, then exec the job.
#
# Usage: bake-entrypoint COMMAND [ARG...]   set up, then exec COMMAND
#        bake-entrypoint --print-env        set up, print `export VAR='...'` lines, run nothing;
#                                           a runner keeps its exit status:
#          bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"
#        bake-entrypoint                    set up, run nothing, exit 0
#
# What to serve, and where, is data: $BAKE_ASSETS/bake.serve (default /opt/bake/assets), written
# by `bake seal` (docs/SERVE_FORMAT.md). This script names no consumer and never sources that
# file: it reads its head (locations, and per consumer its set, directories and placements) with
# `read`, and awk reads the per-file records, only where a location must be proved or copied file
# by file. Python owns the format (`bake seal` refuses whatever its reader would); this script
# checks only what guards itself: the header's version, plain paths, and the variable names its
# `eval`s take (a location's VAR, refused as servefile.REFUSED lists, or a fixed BAKE_* flag).
# What each kind of location gets, and why, is docs/runtime.md's table: a linked view (links into
# the image) where the location is the job's own; a copied view (verified copies, one job copying
# under a lock, or an exclusive mkdir where locks fail) in node storage; a job-local directory
# where neither can be served. Node storage is never followed through a link and never blocks:
# bake's names there are made as new entries (mkdir, O_EXCL, mktemp), and a link, FIFO or device
# in the way is never opened.
#
# Environment: BAKE_ASSETS, BAKE_VERIFY=1 (sha256sum -c first, and a hash of what each location
# serves; exit 3 on a mismatch), BAKE_REQUIRE=1 (exit 6 if any location cannot be served),
# BAKE_QUIET=1 (no ready line), BAKE_SEED=0 (never copy into node storage), BAKE_OFFLINE=1 (each
# fully baked consumer's offline switches). Flags take 1/true/yes/on or 0/false/no/off/empty.
# Exit codes before the job: 2 bad usage, 3 verification, 6 unservable.
#
# Shape: small functions with `local`, as docker-library's entrypoints; those on the per-location
# path set one named result variable instead of printing, since `$(...)` forks in dash and a start
# that finds everything served starts no process at all.
set -eu
# No word splitting or globbing of data: globs are switched on only where a
# directory is listed, and lists are split on newlines only, in `local IFS`.
set -f

_nl='
'
_tab='	'
# What a head record's fields are joined by once read: a tab is IFS white space, so splitting at
# tabs would merge an empty field into the next; this control character (0x1f, the unit
# separator) is not, and no field of an accepted record holds it.
_us=''
# What _serve_at returns: served; cannot be made or written here (own filesystem);
# node storage left as is, with a warning for ${VAR:-...}/SUB (BAKE_SEED=0, unwritable,
# a bad copy); node storage served job-local instead (a wait ran out, something in the
# way); a file where a directory belongs.
_SERVED=0 _CANNOT_MAKE=1 _KEEP=2 _MOVE=3 _NOT_A_DIR=4
# Local-disk speed for the wait bound: a copy, read, hashed and written once.
_DISK_BYTES_PER_S=33554432 _WAIT_MARGIN_S=10
# Without locks: a copier's lock directory whose time stood still this long is a dead job's.
_STALE_S=30

# The per-file half of bake.serve (SERVE_FORMAT.md): the `file` and `link` records of one
# consumer, against `stat` lines on stdin. -v c=CONSUMER view=linked|copied
# mode=names|check|plan|sums report=0|1; a path comes through the environment (_bake_out), since
# -v would read backslashes in it as escapes. Python's reader and `bake seal` own the format: this
# checks only that a NAME is a plain path, which it hands to stat and cp.
# names: NUL-separated names to stat; check: `ok`, or `problem NAME WHY` lines (and
# `refused LINE WHY`); plan: also, for the missing ones, $_bake_out/dirs (`N DIR` per
# directory), $_bake_out/lists/N (their names, NUL-separated) and /sums, and `copy COUNT
# BYTES`; sums: sha256sum -c input for every file record.
# shellcheck disable=SC2016 # awk's own $1..., not the shell's
_AWK='
BEGIN { FS = "\t"; out = ENVIRON["_bake_out"] }
function plain(p,   n, a, i) {
	if (p == "" || substr(p, 1, 1) == "/") return 0
	n = split(p, a, "/")
	for (i = 1; i <= n; i++) if (a[i] == "" || a[i] == "." || a[i] == "..") return 0
	return 1
}
function resolve(name, target,   n, a, m, b, i, k, r) {
	n = split(name, a, "/"); k = n - 1
	m = split(target, b, "/")
	for (i = 1; i <= m; i++) {
		if (b[i] == "..") { if (k == 0) return ""; k-- }
		else if (b[i] == "" || b[i] == ".") return ""
		else a[++k] = b[i]
	}
	for (i = 1; i <= k; i++) r = r (i > 1 ? "/" : "") a[i]
	return r
}
function accept(   k) {
	k = $1 == "file" ? 4 : 3
	if (plain($k)) return 1
	if (report && mode == "check") printf "refused\t%d\t%s\n", FNR, "NAME as a path inside the location, saw \047" $k "\047"
	return 0
}
FNR == NR {
	if ($1 == "file" || $1 == "link") tail = 1
	if (!tail || ($1 != "file" && $1 != "link") || !accept() || $2 != c) next
	if ($1 == "file") {
		name[++n] = $4; type[$4] = "file"; size[$4] = $5; sum[$4] = $6
		serves[$4] = view == "copied" || $3 == "both"
	} else {
		name[++n] = $3; type[$3] = "link"; target[$3] = $4; via[$3] = resolve($3, $4); serves[$3] = 1
	}
	next
}
{ got[$3] = $1; gsize[$3] = $2; gn[$3] = $4 }
function judge(nm,   t, want) {
	t = got[nm]
	if (view == "copied" && type[nm] == "link") {
		want = " -> \047" target[nm] "\047"
		if (t != "symbolic link") return "a " t ", where a link to " target[nm] " belongs"
		if (length(gn[nm]) < length(want) || substr(gn[nm], length(gn[nm]) - length(want) + 1) != want) return "a link to somewhere else, where a link to " target[nm] " belongs"
		return ""
	}
	want = type[nm] == "link" ? size[via[nm]] : size[nm]
	if (t != "regular file" && t != "regular empty file") return "a " t ", not a regular file"
	if (gsize[nm] != want) return gsize[nm] " bytes, not the baked " want
	return ""
}
END {
	for (i = 1; i <= n; i++) {
		nm = name[i]
		if (!serves[nm]) continue
		if (mode == "names") { printf "%s%c", nm, 0; continue }
		if (mode == "sums") { if (type[nm] == "file") printf "%s  %s\n", sum[nm], nm; continue }
		if (!(nm in got)) {
			if (mode == "plan") {
				d = nm; sub(/\/[^\/]*$/, "", d); if (d == nm) d = "."
				if (!(d in group)) { group[d] = ++groups; printf "%d\t%s\n", groups, d > (out "/dirs") }
				printf "%s%c", nm, 0 > (out "/lists/" group[d])
				if (type[nm] == "file") { printf "%s  ./%s\n", sum[nm], nm > (out "/sums"); bytes += size[nm] }
				copies++
				continue
			}
			why = "nothing there"
		} else if ((why = judge(nm)) == "") continue
		if (++problems <= 3) printf "problem\t%s\t%s\n", nm, why
	}
	if (mode == "plan") printf "copy\t%d\t%.0f\n", copies, bytes
	if (mode != "names" && mode != "sums" && !problems) print "ok"
}
'

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

_clock_ms() { # sets _now_ms to a millisecond reading, or empty
	local up
	# busybox ash and bash have $EPOCHREALTIME, to the microsecond.
	# shellcheck disable=SC3028
	case ${EPOCHREALTIME:-} in
	*[.,]*)
		_now_ms=${EPOCHREALTIME%[.,]*}${EPOCHREALTIME#*[.,]}
		_now_ms=${_now_ms%???}
		return 0
		;;
	esac
	# dash has none, and a date process costs a millisecond: the kernel's clock since boot instead,
	# read with `read` (to 10 ms, /proc/uptime in hundredths; a short file, where /proc/self/stat,
	# read byte by byte, costs half a millisecond).
	_now_ms=''
	IFS=' ' read -r up _ 2>/dev/null </proc/uptime || return 0
	case $up in *[!0-9.]* | '' | .* | *.) return 0 ;; esac
	# Hundredths, as two digits: 1NN - 100, so that a leading 0 is never read as octal.
	_now_ms=$((${up%.*} * 1000 + (1${up#*.} - 100) * 10))
}

_usage() {
	# shellcheck disable=SC2016 # the $(...) is text for the reader to run
	printf '%s\n' 'usage: bake-entrypoint COMMAND [ARG...]' \
		'       bake-entrypoint --print-env    (runners: bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env")'
}

_parse_args() { # "$@": sets _mode (_main's) to run or env; exits for --help and bad usage
	_mode=run
	case ${1:-} in
	--print-env)
		if [ $# -ne 1 ]; then
			_say "error: --print-env takes no command, saw '$2'; run the command after the runner line: bake_env=\$(bake-entrypoint --print-env) || exit; eval \"\$bake_env\""
			exit 2
		fi
		_mode="env"
		;;
	-h | --help)
		_usage
		exit 0
		;;
	-*)
		_say "error: unknown option '$1': expected --print-env, --help or a command (exec cannot take one that starts with -); run it through sh -c"
		_usage >&2
		exit 2
		;;
	esac
}

# --- the head of bake.serve, kept as it reads: _head, its checked records, a line each

_plain_path() { # $1: succeed when it is relative path components, none empty, . or ..
	case /$1/ in
	// | *//* | */./* | */../*) return 1 ;;
	esac
}

_find() { # $1 kind, $2 its first field (an ID or a consumer): sets _record to that head record, or fails
	local IFS="$_nl" record
	for record in $_head; do
		case $record in "$1$_us$2$_us"*)
			_record=$record
			return 0
			;;
		esac
	done
	return 1
}

_set_of() { # $1 consumer: read its records once, for _serve_loc's locals: _digest, _bytes, _state, _root and _shown from its set; _dirs, _places and _skips, its dir, place and skip records' fields after the consumer, a line each; fails without a set
	local IFS="$_nl" record set=''
	_dirs='' _places='' _skips=''
	for record in $_head; do
		case $record in
		"set$_us$1$_us"*) set=$record ;;
		"dir$_us$1$_us"*) _dirs=$_dirs${record#"dir$_us$1$_us"}$_nl ;;
		"place$_us$1$_us"*) _places=$_places${record#"place$_us$1$_us"}$_nl ;;
		"skip$_us$1$_us"*) _skips=$_skips${record#"skip$_us$1$_us"}$_nl ;;
		esac
	done
	[ -n "$set" ] || return 1
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $set
	_digest=$3 _bytes=$4 _state=$5 _root=$6 _shown=${7:-}
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

_load_record() { # $1 line: split at tabs, check what guards this script's evals and paths, add it to _head; set _reason and fail if not
	local rest="$1$_tab" record IFS
	case $1 in
	*"$_us"*) _reason="fields without control characters" && return 1 ;; # what _head's fields are joined by
	"$_tab"* | *"$_tab$_tab"*)
		# An empty field (first, or between two tabs): split at one tab at a time, which keeps it,
		# where splitting at IFS white space would drop it and shift the fields after it.
		set --
		while [ -n "$rest" ]; do
			set -- "$@" "${rest%%"$_tab"*}"
			rest=${rest#*"$_tab"}
		done
		;;
	*)
		IFS=$_tab
		# shellcheck disable=SC2086 # split at IFS, with set -f on
		set -- $1
		;;
	esac
	IFS=$_us
	record="$*"
	set -- "$@" '' '' '' '' '' '' # the fields a short record lacks read as empty
	# The rest of the format's rules are Python's: `bake seal` refuses whatever its reader would.
	case $1 in
	loc) _load_loc "$@" ;;
	set)
		case $3 in *[!0-9a-f]* | '') false ;; *) [ "${#3}" -eq 64 ] ;; esac ||
			{ _reason="DIGEST as 64 lower-case hex characters, saw '$3'" && return 1; } # a stamp's name
		case $4 in *[!0-9]* | '') _reason="BYTES as decimal digits, saw '$4'" && return 1 ;; esac # arithmetic
		_plain_path "$5" || { _reason="STATE as plain components, the first hidden (.NAME), saw '$5'" && return 1; }
		_plain_path "$6" || { _reason="ROOT as a path inside BAKE_ASSETS, saw '$6'" && return 1; }
		;;
	dir) [ "$4" = . ] || _plain_path "$4" || { _reason="PATH as . or plain relative components, saw '$4'" && return 1; } ;;
	place)
		_plain_path "$4" || { _reason="SOURCE as a path inside BAKE_ASSETS, saw '$4'" && return 1; }
		[ "$5" = . ] || _plain_path "$5" || { _reason="DEST as . or a path inside the location, saw '$5'" && return 1; }
		;;
	skip) _plain_path "$3" || { _reason="NAME as a path inside the location, saw '$3'" && return 1; } ;;
	*) return 0 ;; # a kind no one reads here
	esac || return 1
	_head=$_head$record$_nl
}

_load_serve() { # read the head of $_assets/bake.serve into _head; fails (with _reason) when it is missing or not v1
	local line number=0 _record=''
	_head=''
	if [ ! -r "$_assets/bake.serve" ] || [ -d "$_assets/bake.serve" ]; then
		if [ -d "$_assets" ]; then _reason="a directory without a readable bake.serve"; else _reason="nothing there"; fi
		return 1
	fi
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		if [ "$number" -eq 1 ]; then
			[ "$line" = '# bake serve v1' ] || { _reason="a bake.serve whose first line is not '# bake serve v1'" && return 1; }
			continue
		fi
		case $line in
		'' | '#'*) continue ;;
		file | link | file"$_tab"* | link"$_tab"*) break ;; # the per-file records: awk's to read
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
	[ -z "${_home+known}" ] || return 0
	_home=${HOME:-}
	[ -z "$_home" ] || return 0
	uid=$(id -u)
	if command -v getent >/dev/null 2>&1; then
		entry=$(getent passwd "$uid" 2>/dev/null) || entry=
		entry=${entry#*:*:*:*:*:}
		_home=${entry%%:*}
	elif [ -r /etc/passwd ]; then
		while IFS=: read -r _ _ user _ _ dir _; do
			if [ "$user" = "$uid" ]; then
				_home=$dir
				break
			fi
		done </etc/passwd
	fi
}

_export() { # $1 name, $2 value: export for the job and remember it for --print-env
	eval "$1=\$2"
	export "${1?}"
	case " $_exports " in *" $1 "*) ;; *) _exports="$_exports $1" ;; esac
}

_resolve() { # $1 loc ID: sets _resolved to its directory, absolute; empty when it has none
	local var sub fallback value set IFS
	_find loc "$1" || return 0
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $_record # loc ID CONSUMER MODE VAR SUB FALLBACK
	unset IFS
	var=$5 sub=${6:-} fallback=${7:-}
	eval "value=\${$var:-} set=\${$var+set}"
	if [ -z "$value" ]; then
		case $fallback in
		'') ;;
		@*)
			_resolve "${fallback#@}"
			value=$_resolved
			;;
		\$HOME*)
			_find_home
			value=${_home:+$_home${fallback#\$HOME}}
			;;
		*) value=$fallback ;;
		esac
		# Set but empty, a variable reads as the working directory to a library that takes
		# it as a path (os.getenv(VAR, DEFAULT)): export the value served, so both agree.
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
			[ "$key" = mnt_id ] || continue
			_mnt=${value#"$_tab"}
			break
		done </proc/self/fdinfo/8
	} 2>/dev/null 8<"$1/." || _mnt=''
}

_fs_kind() { # $1 existing path: sets _kind to own (the container's own filesystem), tmpfs or node
	local devices type
	_kind=node # what stat cannot answer counts as node storage: a copy is safe anywhere, a link is not
	# On the mount / is on: the same filesystem, with no process. Another mount (a volume, a bind
	# mount, a tmpfs, or / bound into itself) is told apart by its device and type, as stat sees them.
	[ -n "$_root_mnt" ] || { _mount_id / && _root_mnt=${_mnt:--}; }
	_mount_id "$1"
	if [ -n "$_mnt" ] && [ "$_mnt" = "$_root_mnt" ]; then
		_kind=own
		return 0
	fi
	devices=$(stat -L -c %d / "$1" 2>/dev/null) || return 0
	if [ "${devices%"$_nl"*}" = "${devices#*"$_nl"}" ]; then
		_kind=own
		return 0
	fi
	type=$(stat -f -L -c %t "$1" 2>/dev/null) || return 0
	# tmpfs and ramfs are job-local: never copy hundreds of MiB into memory.
	case $type in 1021994 | 01021994 | 858458f6) _kind=tmpfs ;; esac
}

_was_job_local() { # $1 directory: succeed when an entrypoint made it job-local: ${TMPDIR:-/tmp}/bake-VAR.*
	local tmp="${TMPDIR:-/tmp}" name
	case $tmp in /*) ;; *) tmp=$PWD/$tmp ;; esac
	case $1 in "$tmp"/bake-*) ;; *) return 1 ;; esac
	name=${1#"$tmp"/}
	case $name in */* | *[!A-Za-z0-9_.-]*) return 1 ;; esac # a job-local directory itself, by its own name
}

_is_job_local() { # $1 path: succeed when it is in a job-local directory of this job, through no link
	local tmp="${TMPDIR:-/tmp}" name part entry IFS
	case $tmp in /*) ;; *) tmp=$PWD/$tmp ;; esac
	case $1 in "$tmp"/bake-*) ;; *) return 1 ;; esac
	name=${1#"$tmp"/}
	# Their names (bake-VAR.SUFFIX) hold no newline, whatever TMPDIR holds.
	case $_nl$_jobnames in *"$_nl${name%%/*}$_nl"*) ;; *) return 1 ;; esac
	# A view of a re-pointed variable links the entries of the directory it named: a path
	# through one of those links is that directory's, never job-local.
	part=$tmp/${name%%/*}
	[ "$name" != "${name#*/}" ] || return 0
	IFS=/
	for entry in ${name#*/}; do
		part=$part/$entry
		[ ! -L "$part" ] || return 1
	done
}

_job_dir() { # $1 variable, $2 an image directory to make it of (a link to each entry), or empty: sets _made to a fresh private directory for it under ${TMPDIR:-/tmp}
	local tmp="${TMPDIR:-/tmp}" count=1 name IFS="$_nl"
	case $tmp in /*) ;; *) tmp=$PWD/$tmp ;; esac
	# A runner may make its TMPDIR only after this runs (vLLM's docker path does, in its preflight):
	# made here as the job's own `mkdir -p` would make it, with the same umask and owner.
	[ -d "$tmp" ] || mkdir -p -- "$tmp" 2>/dev/null || :
	for name in $_jobnames; do count=$((count + 1)); done
	# A new entry: mkdir never follows a link at the name it makes, and a name someone took (this
	# pid's, in another container sharing TMPDIR) falls back to mktemp.
	_made=$tmp/bake-$1.$$.$count
	# Made with its links by one cp where there is an image directory to copy (umask 077: mkdir's
	# 0700); where that is not a new private directory of this user's after all (a name taken
	# between the look and cp's mkdir), mkdir below fails on it, and mktemp picks another name.
	# shellcheck disable=SC3067 # test -O is in dash, busybox ash and bash alike
	if [ -n "${2:-}" ] && [ ! -e "$_made" ] && [ ! -L "$_made" ] && _link_copy "$2" "$_made" 077 &&
		[ -d "$_made" ] && [ ! -L "$_made" ] && [ -O "$_made" ]; then
		:
	elif ! mkdir -m 0700 -- "$_made" 2>/dev/null; then
		_made=$(mktemp -d "$tmp/bake-$1.XXXXXX" 2>/dev/null) || _made=''
	fi
	[ -n "$_made" ] && [ -d "$_made" ] || return 1
	_jobnames=$_jobnames${_made##*/}$_nl
}

# --- proving a location served

_state_ok() { # $1 directory, $2 state: succeed when bake's state directory is there, real all the way
	local part='' entry IFS=/
	for entry in $2; do
		part=$part/$entry
		[ -d "$1$part" ] && [ ! -L "$1$part" ] || return 1
	done
}

_dir_stats() { # $1 directory, $2 consumer, $3 view: sets _stats to each directory of the view, as `stat` sees it now
	local dir="$1" view="$3" entry IFS
	set --
	IFS=$_nl
	for entry in $_dirs; do
		[ "$view" = copied ] || [ "${entry%%"$_us"*}" = both ] || continue
		set -- "$@" "$dir/${entry#*"$_us"}"
	done
	# Inode, mtime and ctime to the nanosecond (%y and %z, in GNU and busybox stat alike): an
	# entry added, removed or renamed moves both times, a tree copied with its times kept has
	# other inodes, and no clock, stepped back or ahead, can make a changed directory look the same.
	_stats=$(stat -c '%i %y %z' -- "$@" 2>/dev/null) || _stats=''
}

_stamped() { # $1 directory, $2 consumer: succeed when its stamp recorded every directory of the view as it is now
	local dir="$1" stamp view root line recorded=''
	_state_ok "$dir" "$_state" || return 1
	stamp=$dir/$_state/served.$_digest
	if [ -f "$stamp.linked" ] && [ ! -L "$stamp.linked" ]; then
		view=linked
	elif [ -f "$stamp.copied" ] && [ ! -L "$stamp.copied" ]; then
		view=copied
	else
		return 1
	fi
	{
		IFS= read -r root || return 1
		while IFS= read -r line; do recorded=$recorded$line$_nl; done
	} 2>/dev/null <"$stamp.$view" || return 1
	[ "$view" = copied ] || [ "$root" = "$_assets" ] || return 1
	_dir_stats "$dir" "$2" "$view"
	[ -n "$_stats" ] && [ "$recorded" = "$_stats$_nl" ]
}

_stamp_begin() { # $1 directory, $2 consumer, $3 view: sets _tmp_stamp to a new stamp in its state directory, or empty
	_tmp_stamp=''
	_state_ok "$1" "$_state" || return 0
	# The directories are recorded before the proof: whatever changes during it makes the stamp
	# disagree later. A builtin write, created with O_EXCL (noclobber, nothing there), 0644 for
	# every job's user; mktemp only when the name is taken (this pid's, from another container).
	_dir_stats "$1" "$2" "$3"
	[ -n "$_stats" ] || return 0
	_tmp_stamp=$1/$_state/.served.$$
	if [ -e "$_tmp_stamp" ] || [ -L "$_tmp_stamp" ] || ! _write_new "$_tmp_stamp" "$_assets$_nl$_stats"; then
		_tmp_stamp=$(mktemp "$1/$_state/.served.XXXXXX" 2>/dev/null) || _tmp_stamp=''
		[ -z "$_tmp_stamp" ] || { printf '%s\n' "$_assets" "$_stats" 2>/dev/null >"$_tmp_stamp" &&
			chmod 0644 -- "$_tmp_stamp"; } || _tmp_stamp=''
	fi
}

_write_new() { # $1 a name where nothing is, $2 a line: create it (O_EXCL) holding the line; fails if not
	local status=0
	set -C
	{ printf '%s\n' "$2" >"$1"; } 2>/dev/null || status=1
	set +C
	return "$status"
}

_stamp_new() { # $1 directory, $2 consumer, $3 view: stamp a location just made whole, where no stamp is yet
	local stamp
	_state_ok "$1" "$_state" || return 0
	stamp=$1/$_state/served.$_digest.$3
	[ ! -e "$stamp" ] && [ ! -L "$stamp" ] || return 0
	_dir_stats "$1" "$2" "$3"
	[ -z "$_stats" ] || _write_new "$stamp" "$_assets$_nl$_stats" || :
}

_stamp_end() { # $1 directory, $2 consumer, $3 view, $4 1 to keep it: put the stamp begun in place, or drop it
	local stamp
	[ -n "$_tmp_stamp" ] || return 0
	stamp=$1/$_state/served.$_digest.$3
	if [ -n "$4" ] && [ ! -L "$stamp" ] && { [ -f "$stamp" ] || [ ! -e "$stamp" ]; }; then
		mv -f -T -- "$_tmp_stamp" "$stamp" 2>/dev/null && return 0
	fi
	rm -f -- "$_tmp_stamp" 2>/dev/null || :
}

_awk() { # $1 consumer, $2 view, $3 mode, $4 - to read stat lines from stdin: the per-file program on bake.serve
	LC_ALL=C awk -v c="$1" -v view="$2" -v mode="$3" -v report="$_report" "$_AWK" "$_assets/bake.serve" ${4:+"$4"}
}

_stat_listing() { # $1 directory, $2 consumer, $3 view: one stat line per served name that exists there
	local format="%F$_tab%s$_tab%n"
	if [ "$3" = linked ]; then
		_awk "$2" "$3" names | (cd -- "$1" && LC_ALL=C xargs -0 -r stat -L -c "$format" -- 2>/dev/null) || :
	else
		# %N is "'NAME' -> 'TARGET'" for a link; GNU stat quotes as QUOTING_STYLE says, so it is pinned.
		_awk "$2" "$3" names |
			(cd -- "$1" && LC_ALL=C QUOTING_STYLE=shell-always xargs -0 -r stat -c "$format$_tab%N" -- 2>/dev/null) || :
	fi
}

_judge() { # $1 awk's check output: set _missing/_why to its first problem; report refused lines; succeed on ok
	local kind a b ok=''
	_missing='' _why=''
	while IFS=$_tab read -r kind a b; do
		case $kind in
		ok) ok=1 ;;
		refused) _bad_line "$a" "$b" ;;
		problem) [ -n "$_missing" ] || _missing=$a _why=$b ;;
		copy) _copies=$a _copy_bytes=$b ;;
		esac
	done <<EOF
$1
EOF
	_report=0 # each refused line once per start
	[ -n "$ok" ]
}

_prove() { # $1 directory, $2 consumer, $3 view: succeed when every file of the view is served there
	local out
	if ! command -v awk >/dev/null 2>&1; then
		_missing='' _why="no awk on PATH to prove it file by file"
		return 1
	fi
	out=$(_stat_listing "$1" "$2" "$3" | _awk "$2" "$3" check - 2>/dev/null) || :
	_judge "$out"
}

# --- the linked view: links into the image, in a constant number of processes

_mkdirs() { # $1 directory, $2 consumer, $3 views to make (both, or both and copied), $4 1 for bake's state too
	local dir="$1" views="$3" state_too="${4:-}" entry IFS
	set --
	[ -z "$state_too" ] || [ -d "$dir/$_state" ] || set -- "$dir/$_state"
	IFS=$_nl
	for entry in $_dirs; do
		case $views:${entry%%"$_us"*} in both:copied) continue ;; esac
		[ -d "$dir/${entry#*"$_us"}" ] || set -- "$@" "$dir/${entry#*"$_us"}"
	done
	[ $# -eq 0 ] || mkdir -p -- "$@" 2>/dev/null || :
}

_placement() { # $1 a place entry (HOW, SOURCE, DEST), $2 its location: sets _how, _from (in the image) and _to
	_how=${1%%"$_us"*}
	_from=${1#*"$_us"}
	_to=$2/${_from#*"$_us"}
	_from=$_assets/${_from%%"$_us"*}
}

_one_source() { # $1 1 to allow alias links: sets _source to the one image directory whose every file its placements link, each by its own name; fails if there is none
	local aliases="$1" entry count=0 IFS
	_source=''
	[ -z "$_skips" ] || return 1
	IFS=$_nl
	for entry in $_places; do
		_placement "$entry" .
		[ "$_how" = link ] && [ "$_to" = "./${_from##*/}" ] && [ "${_source:=${_from%/*}}" = "${_from%/*}" ] &&
			[ -f "$_from" ] && [ ! -L "$_from" ] || return 1
		count=$((count + 1))
	done
	[ -n "$_source" ] || return 1
	set +f
	set -- "$_source"/* "$_source"/.[!.]* "$_source"/..?*
	set -f
	for entry do
		{ [ -e "$entry" ] || [ -L "$entry" ]; } || continue # an unmatched glob
		case $_nl$_places in
		*"$_us${entry#"$_assets"/}$_us"*) count=$((count - 1)) ;;
		*) [ -n "$aliases" ] && [ -L "$entry" ] || return 1 ;; # an alias link, where allowed
		esac
	done
	[ "$count" -eq 0 ]
}

_link_copy() { # $1 an image directory, $2 a directory to make, $3 a umask for it or empty: make it, a link to each entry of $1, in one cp; fails where cp cannot
	[ -z "$_cp_rs_failed" ] || return 1
	# What `mkdir` then `ln -s` per entry would make, in one process: cp names each link's target
	# SOURCE/NAME, and --no-preserve=mode gives the directory mkdir's mode (0777 less the umask).
	(
		[ -z "$3" ] || umask "$3"
		exec cp -r -s -T --no-preserve=mode -- "$1" "$2"
	) 2>/dev/null && return 0
	_cp_rs_failed=1 # busybox's cp has no --no-preserve: mkdir and ln from now on, a failing cp once
	return 1
}

_linked_new() { # $1 a directory to make, whose parent exists, $2 consumer: make it and its links in one cp where its placements are one directory's every file
	[ -z "$_cp_rs_failed" ] && _one_source '' && _link_copy "$_source" "$1" ''
}

_placed_one() { # $1 directory, $2 consumer: succeed when one of its links into the image is there: bake made it
	local entry IFS
	IFS=$_nl
	for entry in $_places; do
		_placement "$entry" "$1"
		[ "$_how" = link ] && [ -L "$_to" ] && [ "$_to" -ef "$_from" ] && return 0
	done
	return 1
}

_in_place() { # $1 directory, $2 consumer: succeed when its placements (no tree among them) are all there, no process started
	local entry IFS
	case $_nl$_places in *"${_nl}tree$_us"*) return 1 ;; esac
	IFS=$_nl
	for entry in $_places; do
		_placement "$entry" "$1"
		# A link into the image (the same file), or the copy a consumer may have rewritten since.
		if [ "$_how" = link ]; then [ -L "$_to" ] && [ "$_to" -ef "$_from" ] || return 1; fi
		if [ "$_how" = copy ]; then [ -f "$_to" ] || return 1; fi
	done
}

_place() { # $1 directory, $2 consumer: make every placement; succeed when each made all it had to
	local dir="$1" entry batch='' all=0 IFS
	set --
	IFS=$_nl
	for entry in $_places; do
		_placement "$entry" "$dir"
		if [ "$_how" = link ] && { [ -e "$_to" ] || [ -L "$_to" ]; }; then
			[ "$_to" -ef "$_from" ] || all=1
		elif [ "$_how" = link ] && [ "${_to##*/}" = "${_from##*/}" ]; then
			# One ln per directory: `ln -s A B DIR/` names each link after its target.
			if [ "${_to%/*}" != "$batch" ]; then
				[ $# -eq 0 ] || ln -s -- "$@" "$batch/" 2>/dev/null || all=1
				set --
				batch=${_to%/*}
			fi
			set -- "$@" "$_from"
		elif [ "$_how" = link ]; then
			ln -s -T -- "$_from" "$_to" 2>/dev/null || all=1
		elif [ "$_how" = tree ]; then
			cp -r -s -T -- "$_from" "$_to" 2>/dev/null || all=1
		elif [ ! -e "$_to" ] && [ ! -L "$_to" ]; then
			cp -- "$_from" "$_to" 2>/dev/null || all=1
		fi
	done
	[ $# -eq 0 ] || ln -s -- "$@" "$batch/" 2>/dev/null || all=1
	set --
	for entry in $_skips; do
		[ ! -L "$dir/$entry" ] || set -- "$@" "$dir/$entry"
	done
	[ $# -eq 0 ] || rm -f -- "$@" 2>/dev/null || all=1
	return "$all"
}

_linked() { # $1 directory, $2 consumer, $3 1 for a fresh job-local one: serve the linked view; returns a status
	local dir="$1" state proven='' tree=''
	state=$_state
	# Only a whole tree needs bake's state there: its marker and stamp (the other placements
	# prove themselves, with no process started). A job-local directory never does.
	case $_nl$_places in *"${_nl}tree$_us"*) [ -n "$3" ] || tree=1 ;; esac
	if [ -n "$tree" ] && [ -f "$dir/$state/links" ]; then
		# Made before: proved as it is first, so that a start that changes nothing writes nothing.
		_stamp_begin "$dir" "$2" linked
		if _prove "$dir" "$2" linked || { _place "$dir" "$2" || _prove "$dir" "$2" linked; }; then proven=1; fi
	else
		# The marker first: a job starting beside this one, or this job's runner starting again
		# with the variables it exported, sees a directory bake makes.
		_mkdirs "$dir" "$2" both "$tree"
		[ -z "$tree" ] || printf '' 2>/dev/null >>"$dir/$state/links" || :
		# A placement that made every link itself is its own proof; else one stat for all files.
		if _place "$dir" "$2"; then
			[ -z "$tree" ] || _stamp_new "$dir" "$2" linked
			return "$_SERVED"
		fi
		[ -z "$tree" ] || _stamp_begin "$dir" "$2" linked
		! _prove "$dir" "$2" linked || proven=1
	fi
	[ -z "$tree" ] || _stamp_end "$dir" "$2" linked "$proven"
	[ -z "$proven" ] || return "$_SERVED"
	if [ -n "$3" ]; then
		_reason="a job-local directory that could not be filled (no space in ${TMPDIR:-/tmp}?)"
	else
		_reason="a location that could not be created or written (read-only, or no permission)${_missing:+: $_missing is $_why}"
	fi
	return "$_CANNOT_MAKE"
}

_empty() { # $1 directory, $2 state: succeed when it holds nothing but bake's own directory
	local state="$2" entry
	set +f
	set -- "$1"/* "$1"/.[!.]* "$1"/..?*
	set -f
	for entry do
		{ [ -e "$entry" ] || [ -L "$entry" ]; } || continue # an unmatched glob
		[ "${entry##*/}" = "${state%%/*}" ] || return 1
	done
}

# --- the copied view: verified copies into node storage, one job at a time

_kind_of() { # $1 path: sets _why to what is there, as a message names it (a lstat, never a follow)
	local looks=0
	# Each test is a stat of its own: a job beside this one may make the name between two of them.
	while [ "$looks" -lt 3 ]; do
		looks=$((looks + 1))
		if [ -L "$1" ]; then
			_why="a symbolic link"
		elif [ -d "$1" ]; then
			_why="a directory"
		elif [ -f "$1" ]; then
			_why="a regular file"
		elif [ -p "$1" ]; then
			_why="a FIFO"
		elif [ -b "$1" ] || [ -c "$1" ]; then
			_why="a device"
		elif [ -S "$1" ]; then
			_why="a socket"
		elif [ -e "$1" ]; then
			continue # made or replaced during the tests above: look again
		else
			_why="nothing"
		fi
		return 0
	done
	_why="something that kept changing while it was looked at"
}

_special() { # $1 path: succeed, setting _why, when something other than a real directory or nothing is there
	_kind_of "$1"
	case $_why in "a directory" | nothing) return 1 ;; esac
}

_in_the_way() { # $1 path: set _reason for something at a name bake needs in node storage, and fail
	_reason="node storage where $1 is $_why, which is never followed or opened"
	_hostile=1
	return 1
}

_node_dirs() { # $1 directory, $2 consumer: make bake's state and each directory of the copied view, never through a link
	local dir="$1" entry part='' IFS
	set --
	IFS=/
	for entry in $_state; do
		part=$part/$entry
		set -- "$@" "$dir$part"
	done
	IFS=$_nl
	for entry in $_dirs; do
		entry=${entry#*"$_us"}
		[ "$entry" = . ] || set -- "$@" "$dir/$entry"
	done
	for entry do
		if _special "$entry"; then _in_the_way "$entry" || return 1; fi
		[ -d "$entry" ] && continue
		# mkdir makes a new entry: it never follows a link at the name it makes.
		mkdir -- "$entry" 2>/dev/null && continue
		if _special "$entry"; then _in_the_way "$entry" || return 1; fi
		[ -d "$entry" ] && continue # a concurrent job made it
		_reason="node storage that cannot be written (cannot make the directory $entry)"
		return 1
	done
}

_open_lock() { # $1 lock file: open it on fd 9, as a new file or a regular one, never through a link
	if [ ! -e "$1" ] && [ ! -L "$1" ]; then
		# noclobber creates with O_EXCL: a link or FIFO appearing at the name fails, never followed.
		set -C
		if { command exec 9>"$1"; } 2>/dev/null; then
			set +C
			return 0
		fi
		set +C
	fi
	_kind_of "$1"
	if [ "$_why" != "a regular file" ]; then
		_in_the_way "the lock $1"
		return 1
	fi
	if ! { command exec 9<"$1"; } 2>/dev/null; then
		_reason="node storage that cannot be written (cannot open the lock $1)"
		return 1
	fi
}

_take_lock() { # $1 directory, $2 consumer: hold its lock on fd 9 as the copier (_copier=1) or after a wait; sets _lockless where locks fail
	local state bytes bound started failed
	state=$_state bytes=$_bytes
	_open_lock "$1/$state/lock" || return 1
	if ! command -v flock >/dev/null 2>&1; then
		_lockless="no flock on PATH"
		return 0
	fi
	# A lock held elsewhere fails in silence (util-linux and busybox alike); a lock call that
	# fails (ENOLCK on NFS without lockd, EOPNOTSUPP) says why on stderr.
	if failed=$(flock -n 9 2>&1); then
		_copier=1
		return 0
	fi
	if [ -n "$failed" ]; then
		_lockless="flock -n on $1/$state/lock failed: ${failed##*: }"
		return 0
	fi
	bound=$((_WAIT_MARGIN_S + bytes / _DISK_BYTES_PER_S))
	_clock_ms
	started=$_now_ms
	if ! flock -s -w "$bound" 9 2>/dev/null; then
		exec 9>&-
		_reason="node storage where another job has been copying for over $bound s (the bound: $_WAIT_MARGIN_S s, plus 1 s per 32 MiB)"
		return 1
	fi
	_clock_ms
	[ -z "$started" ] || [ -z "$_now_ms" ] ||
		_notes="$_notes; waited $(((_now_ms - started) / 1000)) s for another job's copy into $1"
}

_seed_lockless() { # $1 directory, $2 consumer: copy in under an exclusive mkdir, or wait for the job that holds it
	local lock looks=0 seen='' now since=''
	lock=$1/$_state/copying
	_notes="$_notes; $1: $_lockless, so an exclusive mkdir of ${lock##*/} stands in for the lock"
	while :; do
		if [ "$looks" -gt 0 ] && _prove "$1" "$2" copied; then
			_notes="$_notes; waited for another job's copy into $1"
			return 0
		fi
		# mkdir is atomic on NFS too: one job makes it, and copies; the others wait for its copies.
		if mkdir -- "$lock" 2>/dev/null; then
			_copier=1
			_heartbeat "$lock"
			_copy_in "$1" "$2" "$lock" || :
			kill "$_beat" 2>/dev/null || :
			wait "$_beat" 2>/dev/null || :
			rm -rf -- "$lock" 2>/dev/null || :
			[ -z "$_reason" ]
			return
		fi
		_kind_of "$lock"
		case $_why in
		"a directory") ;;
		nothing) continue ;; # the copier just finished, or was reclaimed: prove, or copy what is missing
		*) _in_the_way "the lock $lock" || return 1 ;;
		esac
		# A live copier refreshes its lock's time every 2 s. One that stood still for the whole of
		# _STALE_S, as this job watched it (no clock is compared across machines), is a dead
		# job's: moved aside whole, with its partial, by the waiter that sees it first.
		now=$(stat -c %y -- "$lock" 2>/dev/null) || continue
		_clock_ms
		if [ "$now" != "$seen" ]; then
			seen=$now since=${_now_ms:-0} looks=$((looks + 1))
		elif [ $((${_now_ms:-$((since + looks * 200))} - since)) -ge $((_STALE_S * 1000)) ]; then
			_reclaim "$lock"
			seen=''
			continue
		fi
		looks=$((looks + 1))
		sleep 0.2 2>/dev/null || sleep 1
	done
}

_heartbeat() { # $1 lock directory: sets _beat to a process that refreshes its time every 2 s while it is there
	(
		# The nap runs in the background, so that TERM ends this at once, not after the nap.
		trap 'kill "${nap:-}" 2>/dev/null; exit 0' TERM
		while :; do
			sleep 2 &
			nap=$!
			wait "$nap" || :
			[ -d "$1" ] && [ ! -L "$1" ] || exit 0
			touch -c -h -- "$1" 2>/dev/null || exit 0
		done
	) </dev/null >/dev/null 2>&1 & # never holding the runner's $(...) open
	_beat=$!
}

_reclaim() { # $1 a dead copier's lock directory: move it aside (one waiter wins the rename), then remove it
	local aside
	aside=$(mktemp -u "${1%/*}/stale.XXXXXX" 2>/dev/null) || return 0
	mv -T -- "$1" "$aside" 2>/dev/null || return 0
	rm -rf -- "$aside" 2>/dev/null || :
	_notes="$_notes; removed a dead job's unfinished copy in ${1%/*}"
}

_copy_in() { # $1 directory, $2 consumer, $3 the lock directory without locks: as the copier, copy the missing files in; sets _reason if not
	local dir="$1" state root staging out parent
	state=$_state root=$_root parent=${3:-$dir/$_state}
	if [ -z "${3:-}" ]; then
		set +f
		rm -rf -- "$dir/$state"/partial.* 2>/dev/null || : # a dead copier's: only the flock holder makes them
		set -f
	fi
	staging=$(mktemp -d "$parent/partial.XXXXXX" 2>/dev/null) || staging=''
	if [ -z "$staging" ]; then
		_reason="node storage that cannot be written (no partial directory in $parent)"
		return 1
	fi
	_copies=0 _copy_bytes=0
	mkdir -- "$staging/lists" "$staging/tree" 2>/dev/null || :
	out=$(_stat_listing "$dir" "$2" copied | _bake_out=$staging _awk "$2" copied plan - 2>/dev/null) || :
	_judge "$out" || :
	# The files, and the relative links among them, into a directory of bake's own, one cp per
	# directory; sha256sum checks every copy against the sealed sums; the copies enter by hard
	# link, which never replaces an existing name.
	if [ "$_copies" -eq 0 ]; then
		:
	elif ! _copy_lists "$_assets/$root" "$staging"; then
		_reason="node storage that cannot be written (copying $_copies file(s) there failed: no space, or no permission)"
	elif [ -s "$staging/sums" ] && ! (cd -- "$staging/tree" && sha256sum -c "$staging/sums") >"$staging/checked" 2>&1; then
		_reason="node storage where a copy did not match its sha256: $(_first_failure "$staging")"
	else
		sync -f -- "$staging/tree" 2>/dev/null || sync 2>/dev/null || :
		cp -r -l -P -- "$staging/tree/." "$dir/" 2>/dev/null || :
		_notes="$_notes; copied $_copies file(s), $_copy_bytes bytes, into $dir"
	fi
	rm -rf -- "$staging" 2>/dev/null || :
	[ -z "$_reason" ]
}

_copy_lists() { # $1 source root, $2 staging directory: copy each list of names into its directory under tree/
	local number dir
	while IFS=$_tab read -r number dir; do
		mkdir -p -- "$2/tree/$dir" 2>/dev/null &&
			(cd -- "$1" && LC_ALL=C xargs -0 -r cp -P -t "$2/tree/$dir" -- <"$2/lists/$number") 2>/dev/null || return 1
	done <"$2/dirs"
}

_first_failure() { # $1 staging directory: name the first copy sha256sum -c failed, with what it hashed
	local line name got want
	while IFS= read -r line; do
		case $line in *': FAILED'*) ;; *) continue ;; esac
		name=${line%%: FAILED*}
		got=$(sha256sum <"$1/tree/$name" 2>/dev/null) || got=''
		while IFS=' ' read -r want line; do
			[ "$line" != "$name" ] || break
		done <"$1/sums"
		printf '%s' "a copy of ${name#./} hashed sha256 ${got%% *}, expected $want (bake.serve)"
		return 0
	done <"$1/checked"
	printf '%s' "sha256sum could not check the copies"
}

_seed() { # $1 directory, $2 consumer: take the lock, then copy (the copier) or prove (a waiter); sets _reason if not
	local tool
	for tool in awk xargs; do
		command -v "$tool" >/dev/null 2>&1 && continue
		_reason="node storage, left as is: no $tool on PATH to copy into it safely"
		return 1
	done
	_node_dirs "$1" "$2" || return 1
	_take_lock "$1" "$2" || return 1
	if [ -n "$_lockless" ]; then
		_seed_lockless "$1" "$2"
		return
	fi
	# A waiter proves what the copier left; a copier that died left its lock to the kernel.
	if [ -z "$_copier" ] && ! _prove "$1" "$2" copied; then
		flock -u 9 2>/dev/null || :
		if ! flock -n 9 2>/dev/null; then
			_reason="node storage where another job is copying right now"
			return 1
		fi
		_copier=1
	fi
	[ -z "$_copier" ] || _copy_in "$1" "$2"
}

_copied() { # $1 directory, $2 consumer: serve the copied view there; returns a status
	local dir="$1" failed=''
	_copier='' _lockless=''
	[ -z "$_seed" ] || _stamp_begin "$dir" "$2" copied
	if ! _prove "$dir" "$2" copied; then
		if [ -z "$_seed" ]; then
			_reason="node storage, left as is under BAKE_SEED=0${_missing:+ ($_missing: $_why)}"
			return "$_KEEP"
		fi
		_stamp_end "$dir" "$2" copied ''
		if ! _seed "$dir" "$2"; then
			exec 9>&-
			case $_reason in *"cannot be written"* | *"did not match"* | *"no "*" on PATH"*) return "$_KEEP" ;; esac
			return "$_MOVE"
		fi
		_stamp_begin "$dir" "$2" copied
		_prove "$dir" "$2" copied || failed=1
	fi
	exec 9>&-
	if [ -n "$failed" ]; then
		_stamp_end "$dir" "$2" copied ''
		_reason="node storage where ${_missing:-a file} is ${_why:-not the baked file}, and nothing there is changed"
		return "$_MOVE"
	fi
	_stamp_end "$dir" "$2" copied 1
	[ -z "$_verify" ] || _verify_served "$dir" "$2" copied
	return "$_SERVED"
}

_verify_served() { # $1 directory, $2 consumer, $3 view: BAKE_VERIFY=1: hash what the view serves there; exit 3 on a mismatch
	local out line file got
	out=$(_awk "$2" "$3" sums | (cd -- "$1" && sha256sum -c - 2>&1)) && return 0
	while IFS= read -r line; do
		case $line in *': FAILED'*) ;; *) continue ;; esac
		file=${line%%: FAILED*}
		if got=$(sha256sum <"$1/$file" 2>/dev/null); then got="sha256 ${got%% *}"; else got="no readable file"; fi
		_say "error: BAKE_VERIFY=1: $1/$file: expected the baked file's sha256 (bake.serve), saw $got; remove it, the next start serves the baked file there again; job not started"
		exit 3
	done <<EOF
$out
EOF
	_say "error: BAKE_VERIFY=1: $1: expected every file served there to hash as baked, saw: $out; job not started"
	exit 3
}

# --- serving a location

_where() { # $1 directory, $2 consumer: make it where that is ours to do; sets _view (linked, copied, or made: served); returns a status if not
	local dir="$1" up='' state
	state=$_state
	_kind=''
	if [ ! -d "$dir" ]; then
		if [ -L "$dir" ] && [ ! -e "$dir" ]; then
			# A dangling link: replaced on our own filesystem, never in node storage.
			_fs_kind "${dir%/*}/"
			if [ "$_kind" = node ]; then
				_reason="node storage where $dir is a dangling link, which is never changed"
				return "$_KEEP"
			fi
			rm -f -- "$dir" 2>/dev/null || :
		elif [ ! -e "$dir" ]; then
			up=${dir%/*}
			while [ -n "$up" ] && [ ! -e "$up" ] && [ ! -L "$up" ]; do up=${up%/*}; done
			[ -d "${up:-/}" ] || return "$_CANNOT_MAKE"
			_fs_kind "${up:-/}"
			if [ "$_kind" = node ] && [ -z "$_seed" ]; then
				_reason="node storage, left as is under BAKE_SEED=0"
				return "$_KEEP"
			fi
		fi
		if [ "$_kind" != node ] && [ "$up" = "${dir%/*}" ] && _linked_new "$dir" "$2"; then
			_view=made # whole, its links and all
			return 0
		fi
		# mkdir -p, then a look: a concurrent job's mkdir is no failure (no check-then-act gap).
		mkdir -p -- "$dir" 2>/dev/null || :
		if [ ! -d "$dir" ]; then
			[ -e "$dir" ] && return "$_NOT_A_DIR"
			return "$_CANNOT_MAKE"
		fi
	fi
	[ -n "${_kind:-}" ] || _fs_kind "$dir"
	case $_kind in
	tmpfs) _view=linked ;;
	node) _view=copied ;;
	*)
		if [ -f "$dir/$state/links" ] || _was_job_local "$dir" || _placed_one "$dir" "$2" || _empty "$dir" "$state"; then
			_view=linked
		else
			_view=copied
		fi
		;;
	esac
}

_serve_at() { # $1 directory, $2 consumer: serve its files there; returns a status above
	if [ -z "$_verify" ] && { _in_place "$1" "$2" || _stamped "$1" "$2"; }; then return "$_SERVED"; fi
	if _is_job_local "$1"; then
		_linked "$1" "$2" 1
		return
	fi
	_where "$1" "$2" || return
	case $_view in
	made) return "$_SERVED" ;;
	copied)
		_copied "$1" "$2"
		return
		;;
	esac
	_linked "$1" "$2" '' || return
	# A location bake did not just make may hold, beside its links, a file of the baked size
	# at a baked name: under BAKE_VERIFY=1 the linked view is hashed as the copied view is.
	[ -z "$_verify" ] || _verify_served "$1" "$2" linked
}

_problem() { # $1 location, $2 expected, $3 seen, $4 what to do: one warning (error under BAKE_REQUIRE)
	_unserved=$((_unserved + 1))
	if [ -n "$_require" ]; then
		_say "error: $1: expected $2, saw $3; $4"
	else
		_say "warning: $1: expected $2, saw $3; $4"
	fi
}

_wanted() { # $1 consumer: sets _want to what a location should serve, for messages
	_want="a directory serving $1's ${_shown:-files} from $_assets"
}

_merged() { # $1 variable, $2 node directory or empty, $3 consumer: sets _made to a job-local directory serving both
	# With nothing to merge, the directory is a copy, as links, of the consumer's image directory,
	# its alias links too (the same files by other names): one process where mkdir and ln are two.
	if [ -d "${2:-}" ] || ! _one_source 1; then _source=''; fi
	_job_dir "$1" "$_source" || return 1
	_linked "$_made" "$3" 1 >/dev/null || return 1
	[ -d "${2:-}" ] || return 0
	# Then the node directory's finished files and directories whose names are free (baked files
	# win a shared name): never a link, a special file, a lock, a partial or bake's own state.
	find "$2/" -mindepth 1 -maxdepth 1 '(' -type f -o -type d ')' ! -name '.bake' ! -name '*.lock' \
		! -name '.*.bake-partial' -exec sh -c 'ln -s -- "$@" "$0/" 2>/dev/null; :' "$_made" '{}' + 2>/dev/null || :
}

_moved() { # $1 variable just exported, $2 the loc ID that did: serve again each earlier loc that looks through it
	local var="$1" last="$2" IFS="$_nl" record id
	for record in $_head; do
		case $record in "loc$_us$last$_us"*) return 0 ;; "loc$_us"*) ;; *) continue ;; esac
		IFS=$_us
		# shellcheck disable=SC2086 # split at IFS, with set -f on
		set -- $record # loc ID CONSUMER ...
		IFS=$_nl
		id=$2
		if [ "$3" != - ] && _find set "$3" && _uses "$id" "$var"; then
			# Reported where it was; what counts now is where its consumer looks.
			_tally_of "$id"
			_unserved=$((_unserved - _n))
			_serve_loc "$id"
		fi
	done
}

_uses() { # $1 loc ID, $2 variable: succeed when the loc, or a FALLBACK it names, is resolved through it
	local var="$2" IFS
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

_hostile_warning() { # $1 where: a warning for something planted in node storage (served job-local all the same)
	[ -n "$_hostile" ] || return 0
	_say "warning: $1: $_reason; served job-local for this job; remove it"
}

_serve_export() { # $1 variable, $2 its directory or empty, $3 _serve_at's status, $4 consumer: job-local for this job
	local var="$1"
	if [ "$3" -eq "$_NOT_A_DIR" ]; then
		_problem "$2" "$_want" "a file where a directory belongs, left alone" "remove that file, or unset $var to get a job-local directory"
		return 0
	fi
	if _merged "$var" "$2" "$4"; then
		_hostile_warning "$2"
		_export "$var" "$_made"
		if [ -n "$2" ]; then _notes="$_notes; $var=$_made (job-local, $2 left as is: $_reason)"; fi
		return 0
	fi
	_problem "${2:-\$$var (unset)}" "$_want" "${2:+$_reason, and }no job-local directory under ${TMPDIR:-/tmp}" \
		"make ${TMPDIR:-/tmp} writable, or point $var at a writable directory"
}

_keep_view() { # $1 variable, $2 the directory it names, $3 SUB, $4 consumer: sets _made to a job-local view of it
	local made from rest first entry IFS
	_job_dir "$1" || return 1
	made=$_made from=$2 rest=$3
	# Every entry the variable's directory holds stays in view through a link (a shared model
	# cache stays whole); only the path down to SUB is made of real directories, for bake to serve.
	while [ -n "$rest" ]; do
		first=${rest%%/*}
		_link_entries "$from" "$made"
		rm -f -- "$made/$first" 2>/dev/null || :
		mkdir -- "$made/$first" 2>/dev/null || return 1
		[ "$rest" != "$first" ] || return 0
		made=$made/$first from=$from/$first rest=${rest#*/}
	done
	# No SUB (the Hub's cache, a variable's own directory): every entry but those the consumer
	# serves, and its state, whose paths bake makes as real directories.
	_link_entries "$from" "$made"
	set -- "${_state%%/*}"
	IFS=$_nl
	for entry in $_dirs; do
		entry=${entry#*"$_us"}
		[ "$entry" = . ] || set -- "$@" "${entry%%/*}"
	done
	for entry do
		[ ! -L "$made/$entry" ] || rm -f -- "$made/$entry" 2>/dev/null || :
	done
}

_link_entries() { # $1 a directory, $2 a job-local one: a link in $2 to every entry of $1 (a planted link is never listed)
	[ -d "$1" ] && [ ! -L "$1" ] || return 0
	find "$1/" -mindepth 1 -maxdepth 1 -exec sh -c 'ln -s -- "$@" "$0/" 2>/dev/null; :' "$2" '{}' + 2>/dev/null || :
}

_serve_under() { # $1 loc ID, $2 its variable, $3 its SUB, $4 its directory or empty, $5 _serve_at's status, $6 consumer: warn, or go job-local
	local var="$2" where fix
	if [ -z "$4" ]; then
		where="\${$var:-...}/$3 (no HOME, and no passwd entry for uid $(id -u))"
	else
		where=$4
	fi
	case $5 in
	"$_CANNOT_MAKE" | "$_MOVE")
		if ! _is_job_local "$4" && _keep_view "$var" "${4%/"$3"}" "$3" "$6"; then
			_hostile_warning "$where"
			_export "$var" "$_made"
			if [ "$5" -eq "$_CANNOT_MAKE" ]; then
				_notes="$_notes; $var=$_made (job-local: $where cannot be created)"
			else
				_notes="$_notes; $var=$_made (job-local, $where left as is: $_reason)"
			fi
			_serve_loc "$1"
			_moved "$var" "$1"
			return 0
		fi
		_reason="a location that could not be created or written (read-only, or no permission)"
		fix="point $var at a writable directory, or make ${TMPDIR:-/tmp} writable"
		;;
	"$_KEEP") fix="let a job copy the files there (BAKE_SEED=1, writable), or point $var at an empty or job-local directory" ;;
	*)
		_reason="a file where a directory belongs, left alone"
		fix="remove that file, or point $var elsewhere"
		;;
	esac
	_problem "$where" "$_want" "$_reason" "$fix"
}

_serve_loc() { # $1 loc ID: serve it where its consumer looks, or report it
	local id="$1" dir status=0 consumer mode var sub unserved=$_unserved IFS
	# The consumer's records, read once here for every function this calls (dash, bash and
	# busybox scope a local to the calls it makes).
	local _digest _bytes _state _root _shown _dirs _places _skips
	# And what the functions it calls find out about this location, set by one and read by
	# another (each function's comment names what it sets).
	local _record='' _resolved='' _kind='' _view='' _mnt='' _source='' _how='' _from='' _to='' _made='' _want=''
	local _reason='' _missing='' _why='' _hostile='' _copier='' _lockless='' _beat='' _tmp_stamp='' _copies=0 _copy_bytes=0 _now_ms=''
	_find loc "$id" || return 0
	IFS=$_us
	# shellcheck disable=SC2086 # split at IFS, with set -f on
	set -- $_record # loc ID CONSUMER MODE VAR SUB FALLBACK
	unset IFS
	consumer=$3 mode=$4 var=$5 sub=${6:-}
	[ "$consumer" != - ] && _set_of "$consumer" || return 0
	_resolve "$id"
	dir=$_resolved
	if [ -n "$dir" ]; then
		_serve_at "$dir" "$consumer" || status=$?
		[ "$status" -ne "$_SERVED" ] || return 0
	else
		status=$_CANNOT_MAKE
	fi
	if [ -z "$_reason" ]; then
		case $status in
		"$_NOT_A_DIR") _reason="a file where a directory belongs, left alone" ;;
		*) _reason="a location that could not be created or written (read-only, or no permission)" ;;
		esac
	fi
	_wanted "$consumer"
	if [ "$mode" = export ]; then
		_serve_export "$var" "$dir" "$status" "$consumer"
	else
		_serve_under "$id" "$var" "$sub" "$dir" "$status" "$consumer"
	fi
	_tally="$_tally$id $((_unserved - unserved))$_nl"
}

# --- BAKE_VERIFY

_check_sums_file() { # fail, naming the line, when SHA256SUMS is not what sha256sum -c can check
	local line number=0 cr sum path
	cr=$(printf '\r')
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		case $line in
		*"$cr")
			printf '%s\n' "line $number ends with a carriage return (CRLF line endings): expected LF line endings, as bake writes them"
			return 1
			;;
		esac
		sum=${line%%[!0-9a-f]*}
		path=${line#"$sum"}
		case ${#sum}:$path in
		64:"  "?* | 64:" *"?*) path=${path#??} ;;
		*)
			printf '%s\n' "line $number is not '<sha256>  <path>': expected the format bake writes"
			return 1
			;;
		esac
		case /$path/ in
		//* | */../*)
			printf '%s\n' "line $number names '$path', outside $_assets: expected a relative path inside it"
			return 1
			;;
		esac
	done <"$_assets/SHA256SUMS"
}

_expected_sum() { # $1 asset path: sets _sum to its sha256 from SHA256SUMS, or empty
	local sum path
	_sum=
	[ -r "$_assets/SHA256SUMS" ] || return 0
	while IFS=' ' read -r sum path || [ -n "${path:-}" ]; do
		if [ "${path#\*}" = "$1" ]; then
			_sum=$sum
			return 0
		fi
	done <"$_assets/SHA256SUMS"
}

_verify() { # sha256sum -c over SHA256SUMS; exit 3 naming every file that fails
	local out line bad=0 file got
	if [ ! -r "$_assets/SHA256SUMS" ]; then
		_say "error: BAKE_VERIFY=1: $_assets/SHA256SUMS: expected the baked checksums, saw no readable file; rebuild the image or fix BAKE_ASSETS; job not started"
		exit 3
	fi
	if ! command -v sha256sum >/dev/null 2>&1; then
		_say "error: BAKE_VERIFY=1: expected sha256sum on PATH to check $_assets/SHA256SUMS, saw none; install coreutils or busybox, or unset BAKE_VERIFY; job not started"
		exit 3
	fi
	if ! out=$(_check_sums_file); then
		_say "error: BAKE_VERIFY=1: $_assets/SHA256SUMS $out; rebuild the image, its asset layer is damaged; job not started"
		exit 3
	fi
	# sha256sum's own output, not --quiet: busybox has no --quiet.
	if out=$(cd "$_assets" && sha256sum -c SHA256SUMS 2>&1); then return 0; fi
	while IFS= read -r line; do
		case $line in *': FAILED'*) ;; *) continue ;; esac
		bad=$((bad + 1))
		file=${line%%: FAILED*}
		_expected_sum "$file"
		if got=$(sha256sum <"$_assets/$file" 2>/dev/null); then got="sha256 ${got%% *}"; else got="no readable file"; fi
		_say "error: BAKE_VERIFY=1: $_assets/$file: expected sha256 ${_sum:-unknown} (SHA256SUMS), saw $got; the image's asset layer is damaged: pull the image again or rebuild it; job not started"
	done <<EOF
$out
EOF
	if [ "$bad" -eq 0 ]; then
		_say "error: BAKE_VERIFY=1: sha256sum -c $_assets/SHA256SUMS: expected every file OK, saw: $out; rebuild the image or fix BAKE_ASSETS; job not started"
	fi
	exit 3
}

# --- the end of the run

_no_assets() { # $1 mode (run or env), then the command: nothing to serve; warn and run the job, or stop it
	local mode="$1" what="BAKE_ASSETS=$_assets: expected the baked asset directory with its bake.serve, saw $_reason"
	local fix="run the image that bake built, or set BAKE_ASSETS to its asset directory"
	if [ -n "$_verify" ]; then
		_say "error: BAKE_VERIFY=1: nothing to verify: $what; $fix; job not started"
		exit 3
	fi
	if [ -n "$_require" ]; then
		_say "error: BAKE_REQUIRE=1: $what; $fix; job not started"
		exit 6
	fi
	_say "warning: $what; no location served, the job may download; $fix"
	shift
	[ "$mode" = run ] && [ $# -gt 0 ] || exit 0
	exec "$@"
}

_ready() { # $1 the start, in ms, or empty: the ready line, what is served and how long it took
	local start="$1" list='' took='' record IFS="$_nl" _now_ms
	for record in $_head; do
		case $record in "set$_us"*)
			IFS=$_us
			# shellcheck disable=SC2086 # split at IFS, with set -f on
			set -- $record # set CONSUMER DIGEST BYTES STATE ROOT SHOWN
			IFS=$_nl
			list="$list${7:+, $7}"
			;;
		esac
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
			case $value in
			*\'*)
				quoted="$quoted${value%%\'*}'\\''"
				value=${value#*\'}
				;;
			*)
				quoted=$quoted$value
				break
				;;
			esac
		done
		printf "export %s='%s'\n" "$var" "$quoted"
	done
}

_serve_all() { # serve every loc of bake.serve, in its order
	local record ids='' id IFS="$_nl"
	for record in $_head; do
		case $record in "loc$_us"*)
			record=${record#loc"$_us"}
			ids=$ids${record%%"$_us"*}$_nl
			;;
		esac
	done
	for id in $ids; do
		_serve_loc "$id"
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
	local consumer="$1" IFS="$_nl" record
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

_offline() { # export each fully baked consumer's own offline switches, as $_assets/bake.offline lists them
	local file="$_assets/bake.offline" line number=0 consumer var value current exported='' _record=''
	if [ ! -f "$file" ] || [ ! -r "$file" ]; then
		_say "warning: BAKE_OFFLINE=1: $file: expected the offline switches bake seal writes, saw no readable file; no switch exported: reseal with this bake"
		return 0
	fi
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		if [ "$number" -eq 1 ]; then
			[ "$line" = '# bake offline v1' ] && continue
			_say "warning: BAKE_OFFLINE=1: $file: expected '# bake offline v1' as its first line, saw another; no switch exported"
			return 0
		fi
		case $line in '' | '#'*) continue ;; esac
		consumer=${line%%"$_tab"*} value=${line#*"$_tab"}
		var=${value%%"$_tab"*} value=${value#*"$_tab"}
		if [ "$line" != "$consumer$_tab$var$_tab$value" ] || ! _offline_ok "$consumer" "$var" "$value"; then
			_say "warning: BAKE_OFFLINE=1: $file line $number: expected CONSUMER, VAR and VALUE (a word, or @PATH in the asset directory), saw another line; skipped"
			continue
		fi
		_baked_whole "$consumer" || continue
		case $value in @*) value=$_assets/${value#@} ;; esac
		eval "current=\${$var:-}"
		if [ -n "$current" ] && [ "$current" != "$value" ]; then
			_say "warning: BAKE_OFFLINE=1: $var='$current' is the job's own and is left as is; offline, $consumer would read $var='$value'"
			continue
		fi
		_export "$var" "$value"
		exported="$exported $var"
	done <"$file"
	[ -z "$exported" ] || _notes="$_notes; offline:$exported"
}

_init() { # the run's state at its start: the flags off but BAKE_SEED, the asset directory from BAKE_ASSETS
	_unserved=0 _notes='' _exports='' _jobnames='' _tally='' _require='' _seed=1 _verify='' _report=1
	_root_mnt='' _cp_rs_failed=''
	_assets=${BAKE_ASSETS:-/opt/bake/assets}
	case $_assets in /*) ;; *) _assets=$PWD/$_assets ;; esac
}

_main() {
	local quiet='' offline='' start='' _now_ms _mode
	_init
	if _flag BAKE_QUIET 0; then quiet=1; else
		_clock_ms
		start=$_now_ms
	fi
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
	if [ "$_mode" = env ]; then
		_print_env
		return 0
	fi
	[ $# -gt 0 ] || return 0
	exec "$@"
}

# A test sources this file with _BAKE_SOURCED=1 to call one function (tests/test_entrypoint_functions.py).
[ -n "${_BAKE_SOURCED:-}" ] || _main "$@"

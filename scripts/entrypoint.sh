#!/bin/sh
# shellcheck disable=SC3043 # `local` is in dash, busybox ash and bash: every shell this runs under
# bake-entrypoint: serve the baked assets where each consumer looks for them, then exec the job.
#
# Usage: bake-entrypoint COMMAND [ARG...]        set up, then exec COMMAND
#        bake-entrypoint --print-env             set up, print `export VAR='...'`
#                                                 lines for eval, run nothing
#        bake-entrypoint                         set up, run nothing, exit 0
#
# What to serve, and where, is data: $BAKE_ASSETS/bake.serve (default
# /opt/bake/assets), written by `bake seal` (docs: SERVE_FORMAT). Its `loc` lines
# are the consumers' lookup locations ($VAR, or ${VAR:-DEFAULT}/SUB), its `file`
# lines the baked files served at each, its `link` lines relative links among
# them. It is read with `read`, never sourced or eval'd; this script names no
# consumer. Per location:
#   nothing, an empty directory or a dangling link, on the container's own
#   filesystem (or a tmpfs) -> a real directory, with a link per baked file into
#   $BAKE_ASSETS (real directories for nested names, links only at the leaves).
#   node storage: the location, or its nearest existing ancestor, is on another
#   filesystem than / that is not a tmpfs (a volume, a bind mount), or it
#   already holds data -> gains a verified copy of each missing baked file
#   (seeding, below), then the link records whose targets are copies there.
#   Never a link into the image, which would dangle for jobs of other images;
#   nothing there is changed or removed. A regular file of the baked size at a
#   baked name counts as that file.
#   node storage that cannot be seeded (read-only, BAKE_SEED=0, a copy in
#   progress in another job, a different file under a baked name) -> a $VAR
#   location is re-pointed, for this job only, to a job-local directory linking
#   the baked files and then the location's own entries (baked files win a
#   shared name); a ${VAR:-...}/SUB location gets a warning.
#   a file where a directory belongs -> left alone, with a warning.
#   An unset or empty $VAR is exported to a job-local directory. A ${VAR:-...}
#   location that cannot be created exports VAR to a job-local directory, and
#   the ready line says so. Job-local: a fresh `mktemp -d` under ${TMPDIR:-/tmp},
#   private to this job.
# Seeding one file: under its lock file (flock(1), released by the kernel when a
# job dies, so a killed copier never blocks later ones; the Hub's lock paths are
# the Hub client's own), copy to a hidden partial beside it, check its size and
# its sha256 against SHA256SUMS, fsync, then hard-link it to the final name: a
# rename that never replaces. A job that finds the lock taken does not wait.
# Without flock on PATH, node storage is not seeded.
#
# Environment: BAKE_ASSETS, BAKE_VERIFY=1 (sha256sum -c first; exit 3 on a
# mismatch), BAKE_REQUIRE=1 (exit 6 if any location cannot be served),
# BAKE_QUIET=1 (no ready line), BAKE_SEED=0 (never copy into node storage).
# Flags take 1/true/yes/on or 0/false/no/off/empty.
# Exit codes before the job: 2 bad usage, 3 verification, 6 unservable.
#
# Shape: small functions with `local`, as docker-library's entrypoints. Those
# that run once return through stdout; those on the per-file path set one named
# result variable instead, since `$(...)` forks in dash and a start that finds
# everything served must stay fork-free (the budget is 10 ms).
set -eu
# No word splitting or globbing of data: globs are switched on only where a
# directory is listed, and lists of paths are kept in positional parameters.
set -f

_nl='
'
_tab='	'
# _serve_at's statuses.
_SERVED=0 _CANNOT_MAKE=1 _NOT_SEEDED=2 _NOT_A_DIR=3

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

_clock_ms() { # sets _now_ms to a millisecond clock reading, or empty when the shell has none
	# busybox ash and bash have $EPOCHREALTIME; dash pays one date fork.
	# shellcheck disable=SC3028
	case ${EPOCHREALTIME:-} in
	*[.,]*)
		_now_ms=${EPOCHREALTIME%[.,]*}${EPOCHREALTIME#*[.,]}
		_now_ms=${_now_ms%???}
		;;
	*)
		_now_ms=$(date +%s%N 2>/dev/null) || _now_ms=
		case $_now_ms in *[!0-9]* | '') _now_ms= ;; *) _now_ms=${_now_ms%??????} ;; esac
		;;
	esac
}

_usage() {
	# shellcheck disable=SC2016 # the $(...) is text for the reader to run
	printf '%s\n' 'usage: bake-entrypoint COMMAND [ARG...]' \
		'       bake-entrypoint --print-env    (runners: eval "$(bake-entrypoint --print-env)")'
}

_parse_args() { # "$@": sets _mode to run or env; exits for --help and bad usage
	_mode=run
	case ${1:-} in
	--print-env)
		if [ $# -ne 1 ]; then
			_say "error: --print-env takes no command, saw '$2'; run the command after eval \"\$(bake-entrypoint --print-env)\""
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

# --- bake.serve, read into tables: _loc_<field>_<n>, _file_<field>_<n>, _link_<field>_<n>

_plain_path() { # $1: succeed when it is relative path components, none empty, . or ..
	case /$1/ in
	// | *//* | */./* | */../*) return 1 ;;
	esac
}

_loc_index() { # $1 loc ID: sets _index to its row, or fails
	_index=1
	while [ "$_index" -le "$_nlocs" ]; do
		eval "[ \"\$_loc_id_$_index\" != \"\$1\" ]" || return 0
		_index=$((_index + 1))
	done
	return 1
}

_load_loc() { # loc ID CONSUMER MODE VAR SUB FALLBACK: add a row, or set _reason and fail
	local fallback="$7"
	[ $# -eq 7 ] || { _reason="7 tab-separated fields, saw $#" && return 1; }
	case $2 in '' | *[!A-Za-z0-9_.-]*) _reason="an ID of letters, digits, _ . -, saw '$2'" && return 1 ;; esac
	! _loc_index "$2" || { _reason="one loc line per ID, saw '$2' twice" && return 1; }
	case $5 in
	[A-Za-z_]*) ;;
	*) _reason="a variable name, saw '$5'" && return 1 ;;
	esac
	case $5 in
	*[!A-Za-z0-9_]* | PATH | HOME | IFS | TMPDIR | LD_* | BAKE_*) _reason="a variable name other than PATH, HOME, IFS, TMPDIR, LD_* and BAKE_*, saw '$5'" && return 1 ;;
	esac
	[ -z "$6" ] || _plain_path "$6" || { _reason="SUB as plain relative components, saw '$6'" && return 1; }
	case $4:$7 in
	export:) [ -z "$6" ] || { _reason="no SUB for an export location, saw '$6'" && return 1; } ;;
	under:@*)
		_loc_index "${7#@}" || { _reason="FALLBACK @ID naming an earlier loc line, saw '$7'" && return 1; }
		fallback=@$_index
		;;
	under:\$HOME | under:/) ;;
	under:\$HOME/* | under:/*)
		_plain_path "${7#*/}" || { _reason="FALLBACK as plain path components, saw '$7'" && return 1; }
		;;
	*) _reason="MODE export with no FALLBACK, or under with /PATH, \$HOME[/PATH] or @ID, saw '$4' and '$7'" && return 1 ;;
	esac
	_nlocs=$((_nlocs + 1))
	eval "_loc_id_$_nlocs=\$2 _loc_consumer_$_nlocs=\$3 _loc_mode_$_nlocs=\$4 _loc_var_$_nlocs=\$5"
	eval "_loc_sub_$_nlocs=\$6 _loc_fallback_$_nlocs=\$fallback _loc_files_$_nlocs= _loc_links_$_nlocs= _loc_at_$_nlocs= _loc_unserved_$_nlocs="
}

_load_file() { # file ID ASSET NAME SIZE LOCK: add a row, or set _reason and fail
	[ $# -eq 6 ] || { _reason="6 tab-separated fields, saw $#" && return 1; }
	_loc_index "$2" || { _reason="the ID of a loc line above, saw '$2'" && return 1; }
	_plain_path "$3" || { _reason="ASSET as a path inside BAKE_ASSETS, saw '$3'" && return 1; }
	_plain_path "$4" || { _reason="NAME as a path inside the location, saw '$4'" && return 1; }
	case $5 in '' | *[!0-9]*) _reason="SIZE in bytes, saw '$5'" && return 1 ;; esac
	[ -z "$6" ] || _plain_path "$6" || { _reason="LOCK as a path inside the location, saw '$6'" && return 1; }
	_nfiles=$((_nfiles + 1))
	eval "_file_asset_$_nfiles=\$3 _file_name_$_nfiles=\$4 _file_size_$_nfiles=\$5 _file_lock_$_nfiles=\$6"
	eval "_loc_files_$_index=\"\$_loc_files_$_index $_nfiles\""
}

_load_link() { # link ID NAME TARGET: add a row, or set _reason and fail
	local up="$4" depth=0 rest="$3"
	[ $# -eq 4 ] || { _reason="4 tab-separated fields, saw $#" && return 1; }
	_loc_index "$2" || { _reason="the ID of a loc line above, saw '$2'" && return 1; }
	_plain_path "$3" || { _reason="NAME as a path inside the location, saw '$3'" && return 1; }
	# The target climbs at most as many levels as the link sits deep: it stays inside.
	while case $rest in */*) true ;; *) false ;; esac do
		rest=${rest#*/}
		depth=$((depth + 1))
	done
	while case $up in ../*) true ;; *) false ;; esac do
		up=${up#../}
		depth=$((depth - 1))
	done
	if [ "$depth" -lt 0 ] || ! _plain_path "$up"; then
		_reason="TARGET resolving inside the location, saw '$4'"
		return 1
	fi
	_nlinks=$((_nlinks + 1))
	eval "_link_name_$_nlinks=\$3 _link_target_$_nlinks=\$4"
	eval "_loc_links_$_index=\"\$_loc_links_$_index $_nlinks\""
}

_load_record() { # $1 line: split at tabs (empty fields kept) and add it; set _reason and fail if malformed
	local rest="$1$_tab"
	set --
	while [ -n "$rest" ]; do
		set -- "$@" "${rest%%"$_tab"*}"
		rest=${rest#*"$_tab"}
	done
	case $1 in
	loc) _load_loc "$@" ;;
	file) _load_file "$@" ;;
	link) _load_link "$@" ;;
	*)
		_reason="a loc, file or link record, saw kind '$1'"
		return 1
		;;
	esac
}

_load_serve() { # read $_assets/bake.serve; fails (with _reason) when it is missing or not v1
	local line number=0
	_nlocs=0 _nfiles=0 _nlinks=0
	if [ ! -r "$_assets/bake.serve" ]; then
		if [ -d "$_assets" ]; then _reason="a directory without a readable bake.serve"; else _reason="nothing there"; fi
		return 1
	fi
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		if [ "$number" -eq 1 ]; then
			[ "$line" = '# bake serve v1' ] || { _reason="a bake.serve whose first line is not '# bake serve v1'" && return 1; }
			continue
		fi
		case $line in '' | '#'*) continue ;; esac
		_load_record "$line" || _problem "$_assets/bake.serve line $number" "$_reason" "a line this entrypoint cannot read, skipped" \
			"rebuild the image with the bake that wrote it, or use that bake's entrypoint"
	done <"$_assets/bake.serve"
	[ "$number" -gt 0 ] || { _reason="an empty bake.serve" && return 1; }
}

# --- where a location is

_find_uid() { # sets _uid to the effective uid, without a fork where /proc allows
	local key effective
	[ -z "${_uid:-}" ] || return 0
	if [ -r /proc/self/status ]; then
		while IFS='	' read -r key _ effective _; do
			if [ "$key" = Uid: ]; then
				_uid=$effective
				break
			fi
		done </proc/self/status
	fi
	[ -n "${_uid:-}" ] || _uid=$(id -u)
}

_find_home() { # sets _home from HOME, else from the password database; empty if neither knows
	local entry user dir
	[ -z "${_home_known:-}" ] || return 0
	_home_known=1
	_home=${HOME:-}
	[ -z "$_home" ] || return 0
	_find_uid
	if command -v getent >/dev/null 2>&1; then
		entry=$(getent passwd "$_uid" 2>/dev/null) || entry=
		entry=${entry#*:*:*:*:*:}
		_home=${entry%%:*}
	elif [ -r /etc/passwd ]; then
		while IFS=: read -r _ _ user _ _ dir _; do
			if [ "$user" = "$_uid" ]; then
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

_resolve() { # $1 loc row: sets _resolved to its directory, absolute; empty when it has none
	local var sub fallback value set
	eval "var=\$_loc_var_$1 sub=\$_loc_sub_$1 fallback=\$_loc_fallback_$1"
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
		# A set but empty variable reads as the working directory to its consumer: make both agree.
		if [ -n "$set" ] && [ -n "$value" ]; then _export "$var" "$value"; fi
	fi
	case $value in
	'') ;;
	/*) value=$value${sub:+/$sub} ;;
	*) value=$PWD/$value${sub:+/$sub} ;;
	esac
	_resolved=$value
}

_on_node_fs() { # $1 existing path: succeed when it is on a filesystem other than / that is no tmpfs
	local devices type
	# What stat cannot answer counts as node storage: a copy is safe anywhere, a link is not.
	devices=$(stat -L -c %d / "$1" 2>/dev/null) || return 0
	[ "${devices%"$_nl"*}" != "${devices#*"$_nl"}" ] || return 1
	type=$(stat -f -L -c %t "$1" 2>/dev/null) || return 0
	# tmpfs and ramfs are job-local: never copy hundreds of MiB into memory.
	case $type in 1021994 | 01021994 | 858458f6) return 1 ;; esac
}

_is_job_local() { # $1 path: succeed when it is in a job-local directory of this job
	local n=1 dir
	while [ "$n" -le "$_njobdirs" ]; do
		eval "dir=\$_jobdir_$n"
		case $1 in "$dir" | "$dir"/*) return 0 ;; esac
		n=$((n + 1))
	done
	return 1
}

_job_dir() { # $1 variable: sets _made to a fresh private directory for it under ${TMPDIR:-/tmp}
	local tmp="${TMPDIR:-/tmp}"
	case $tmp in /*) ;; *) tmp=$PWD/$tmp ;; esac
	_made=$(mktemp -d "$tmp/bake-$1.XXXXXX" 2>/dev/null) || _made=
	[ -n "$_made" ] && [ -d "$_made" ] || return 1
	_njobdirs=$((_njobdirs + 1))
	eval "_jobdir_$_njobdirs=\$_made"
}

# --- what is in a location

_sizes_match() { # $1 sizes, space-separated, then one file each: succeed when every size is right
	local want="$1" got line size
	shift
	got=$(stat -L -c %s -- "$@" 2>/dev/null) || return 1
	got=$got$_nl
	for size in $want; do
		line=${got%%"$_nl"*}
		got=${got#*"$_nl"}
		[ "$line" = "$size" ] || return 1
	done
}

_complete() { # $1 directory, $2 loc row: succeed when each file and link is there (sets _missing)
	local dir="$1" files links sizes='' k name asset size
	eval "files=\$_loc_files_$2 links=\$_loc_links_$2"
	set --
	for k in $files; do
		eval "name=\$_file_name_$k asset=\$_file_asset_$k size=\$_file_size_$k"
		_missing=$name
		[ ! "$dir/$name" -ef "$_assets/$asset" ] || continue
		[ -f "$dir/$name" ] || return 1
		set -- "$@" "$dir/$name"
		sizes="$sizes $size"
	done
	for k in $links; do
		eval "_missing=\$_link_name_$k"
		[ -e "$dir/$_missing" ] || return 1
	done
	_missing=
	[ $# -eq 0 ] || _sizes_match "$sizes" "$@" && return 0
	# Which one, for the message: a stat per file, on this failing path only.
	for k in $files; do
		eval "_missing=\$_file_name_$k asset=\$_file_asset_$k size=\$_file_size_$k"
		[ "$dir/$_missing" -ef "$_assets/$asset" ] || _sizes_match "$size" "$dir/$_missing" || return 1
	done
	return 1
}

_ours() { # $1 path inside the location, $2 loc row, $3 entry: succeed when bake makes it there
	local files links k name asset
	eval "files=\$_loc_files_$2 links=\$_loc_links_$2"
	for k in $files; do
		eval "name=\$_file_name_$k asset=\$_file_asset_$k"
		if [ -L "$3" ]; then
			[ "$name" != "$1" ] || [ ! "$3" -ef "$_assets/$asset" ] || return 0
		else
			case $name in "$1"/*) return 0 ;; esac
		fi
	done
	for k in $links; do
		eval "name=\$_link_name_$k"
		if [ -L "$3" ]; then
			[ "$name" != "$1" ] || return 0
		else
			case $name in "$1"/*) return 0 ;; esac
		fi
	done
	return 1
}

_only_ours() { # $1 directory, $2 its path inside the location, $3 loc row: succeed when it holds no data
	local inside="$2" row="$3" entry rel
	set +f
	set -- "$1"/* "$1"/.[!.]* "$1"/..?*
	set -f
	for entry do
		[ -e "$entry" ] || [ -L "$entry" ] || continue # an unmatched glob
		rel=$inside${entry##*/}
		case $rel in *"$_nl"*) return 1 ;; esac
		if [ -L "$entry" ] || [ ! -d "$entry" ]; then
			[ -L "$entry" ] && _ours "$rel" "$row" "$entry" || return 1
		else
			_ours "$rel" "$row" "$entry" && _only_ours "$entry" "$rel/" "$row" || return 1
		fi
	done
}

# --- filling a location

_link_files() { # $1 directory, $2 loc row: link each missing baked file into the image
	local dir="$1" files k name asset parent='' base
	eval "files=\$_loc_files_$2"
	set --
	for k in $files; do
		eval "name=\$_file_name_$k"
		case $name in */*) set -- "$@" "$dir/${name%/*}" ;; esac
	done
	[ $# -eq 0 ] || mkdir -p -- "$@" 2>/dev/null || :
	# One ln per directory: `ln -s A B DIR/` names each link after its target.
	set --
	for k in $files; do
		eval "name=\$_file_name_$k asset=\$_file_asset_$k"
		[ ! -e "$dir/$name" ] && [ ! -L "$dir/$name" ] || continue
		base=${name##*/}
		case $name in */*) name=$dir/${name%/*} ;; *) name=$dir ;; esac
		if [ "$base" != "${asset##*/}" ]; then
			ln -s -T -- "$_assets/$asset" "$name/$base" 2>/dev/null || :
			continue
		fi
		if [ "$name" != "$parent" ] && [ $# -gt 0 ]; then
			ln -s -- "$@" "$parent/" 2>/dev/null || :
			set --
		fi
		parent=$name
		set -- "$@" "$_assets/$asset"
	done
	[ $# -eq 0 ] || ln -s -- "$@" "$parent/" 2>/dev/null || :
}

_add_links() { # $1 directory, $2 loc row, $3 1 for node storage: make each absent link record
	local dir="$1" links k name target parent
	eval "links=\$_loc_links_$2"
	for k in $links; do
		eval "name=\$_link_name_$k target=\$_link_target_$k"
		[ ! -e "$dir/$name" ] && [ ! -L "$dir/$name" ] || continue
		# Where the target lands, worked out on the names: the link's directory may not exist yet,
		# and is made only once the target is there.
		parent=${name%/*}
		[ "$parent" != "$name" ] || parent=
		while case $target in ../*) true ;; *) false ;; esac do
			target=${target#../}
			case $parent in */*) parent=${parent%/*} ;; *) parent= ;; esac
		done
		target=$dir/${parent:+$parent/}$target
		# In node storage only onto a real file: never a chain that ends in the image.
		if [ -n "$3" ]; then [ -f "$target" ] && [ ! -L "$target" ] || continue; fi
		[ -e "$target" ] || continue
		case $name in */*) mkdir -p -- "$dir/${name%/*}" 2>/dev/null || continue ;; esac
		eval "target=\$_link_target_$k"
		ln -s -T -- "$target" "$dir/$name" 2>/dev/null || :
	done
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

_copy_verified() { # $1 asset path, $2 partial file, $3 size: copy, check, fsync; set _reason and fail if not
	local got
	_expected_sum "$1"
	if [ -z "$_sum" ]; then
		_reason="node storage, but SHA256SUMS lists no sha256 for $1 to verify a copy against"
		return 1
	fi
	rm -f -- "$2" 2>/dev/null || :
	# noclobber: O_EXCL, so a link planted at the partial's name is never followed.
	if ! (set -C && exec cat -- "$_assets/$1" >"$2") 2>/dev/null; then
		_reason="node storage that cannot be written (copying $1 there failed: no space, or no permission)"
		return 1
	fi
	if ! _sizes_match "$3" "$2"; then
		_reason="node storage where a copy of $1 came out with the wrong size (expected $3 bytes)"
		return 1
	fi
	# The copy is read back once: every later job, in any image, trusts its size alone.
	if command -v sha256sum >/dev/null 2>&1; then
		got=$(sha256sum <"$2" 2>/dev/null) || got=
		if [ "${got%% *}" != "$_sum" ]; then
			_reason="node storage where a copy of $1 hashed sha256 '${got%% *}', expected $_sum (SHA256SUMS)"
			return 1
		fi
	fi
	sync -- "$2" 2>/dev/null || :
}

_copy() { # $1 directory, $2 file row: add a verified copy under the file's lock; set _reason and fail if not
	local name asset size lock target partial status=0
	eval "name=\$_file_name_$2 asset=\$_file_asset_$2 size=\$_file_size_$2 lock=\$_file_lock_$2"
	target=$1/$name
	lock=$1/${lock:-$name.lock}
	mkdir -p -- "${target%/*}" "${lock%/*}" 2>/dev/null || :
	if ! { command exec 9>>"$lock"; } 2>/dev/null; then
		_reason="node storage that cannot be written (no lock file $lock)"
		return 1
	fi
	if ! flock -n 9 2>/dev/null; then
		exec 9>&-
		_reason="node storage where another job is copying $name right now (lock $lock)"
		return 1
	fi
	if [ ! -e "$target" ] && [ ! -L "$target" ]; then
		partial=${target%/*}/.${target##*/}.bake-partial
		# ln makes the final name appear at once, complete, and fails if anything is there:
		# a rename that never replaces (mv would replace; mv -n checks, then renames).
		if _copy_verified "$asset" "$partial" "$size" && ! ln -T -- "$partial" "$target" 2>/dev/null; then
			_reason="node storage where $name could not be put in place (no hard links there?)"
			status=1
		fi
		rm -f -- "$partial" 2>/dev/null || :
	fi
	exec 9>&-
	return "$status"
}

_seed() { # $1 node storage directory, $2 loc row: copy in each missing baked file; sets _reason on a miss
	local files k name
	eval "files=\$_loc_files_$2"
	for k in $files; do
		eval "name=\$_file_name_$k"
		[ ! -e "$1/$name" ] && [ ! -L "$1/$name" ] || continue
		if ! command -v flock >/dev/null 2>&1; then
			_reason="node storage, left as is: no flock on PATH to copy into it safely"
			return 0
		fi
		_copy "$1" "$k" || return 0
	done
}

_place() { # $1 directory, $2 loc row: make it where that is ours to do; sets _node for node storage
	local dir="$1" up="$1"
	_node=
	if [ ! -d "$dir" ]; then
		while [ -n "$up" ] && [ ! -e "$up" ] && [ ! -L "$up" ]; do up=${up%/*}; done
		if [ "$up" = "$dir" ]; then
			[ ! -e "$dir" ] || return "$_NOT_A_DIR"
			# A dangling link: replaced on our own filesystem, never in node storage.
			if _on_node_fs "${dir%/*}/"; then
				_node=1 _reason="node storage where $dir is a dangling link, which is never changed"
				return "$_NOT_SEEDED"
			fi
			rm -f -- "$dir" 2>/dev/null || :
		elif [ ! -d "${up:-/}" ]; then
			return "$_CANNOT_MAKE"
		elif _on_node_fs "${up:-/}"; then
			_node=1
			if [ -z "$_seed" ]; then
				_reason="node storage, left as is under BAKE_SEED=0"
				return "$_NOT_SEEDED"
			fi
		fi
		# mkdir -p, then a look: a concurrent job's mkdir is no failure (no check-then-act gap).
		mkdir -p -- "$dir" 2>/dev/null || :
		if [ ! -d "$dir" ]; then
			[ -e "$dir" ] && return "$_NOT_A_DIR"
			return "$_CANNOT_MAKE"
		fi
	elif _on_node_fs "$dir" || ! _only_ours "$dir" "" "$2"; then
		_node=1
	fi
}

_serve_at() { # $1 directory, $2 loc row: serve the loc's files there; returns a status above
	local status=0
	_reason=
	if [ -d "$1" ] && _complete "$1" "$2"; then return "$_SERVED"; fi
	if _is_job_local "$1"; then
		_node=
		mkdir -p -- "$1" 2>/dev/null || :
	else
		_place "$1" "$2" || return $?
	fi
	if [ -z "$_node" ]; then
		_link_files "$1" "$2"
		_add_links "$1" "$2" ''
	elif [ -n "$_seed" ]; then
		_seed "$1" "$2"
		_add_links "$1" "$2" 1
	else
		_reason="node storage, left as is under BAKE_SEED=0"
	fi
	_complete "$1" "$2" && return "$_SERVED"
	if [ -n "$_node" ]; then
		[ -n "$_reason" ] || _reason="node storage where $_missing is not the baked file, and nothing there is changed"
		return "$_NOT_SEEDED"
	fi
	[ -n "$_reason" ] || _reason="a location that could not be created or written (read-only, or no permission)"
	return "$_CANNOT_MAKE"
}

# --- serving each location

_problem() { # $1 location, $2 expected, $3 seen, $4 what to do: one warning (error under BAKE_REQUIRE)
	_unserved=$((_unserved + 1))
	if [ -n "$_require" ]; then
		_say "error: $1: expected $2, saw $3; $4"
	else
		_say "warning: $1: expected $2, saw $3; $4"
	fi
}

_wanted() { # $1 loc row: sets _want to what it should serve, for messages
	local files k count=0 name
	eval "files=\$_loc_files_$1 _want=\$_loc_consumer_$1"
	_want="a directory serving $_want's"
	for k in $files; do
		count=$((count + 1))
		eval "name=\$_file_name_$k"
		if [ "$count" -le 3 ]; then _want="$_want $name"; fi
	done
	if [ "$count" -gt 3 ]; then _want="$_want and $((count - 3)) more"; fi
	_want="$_want from $_assets"
}

_merged() { # $1 loc row, $2 node directory or empty: sets _made to a job-local directory serving both
	local var entry
	eval "var=\$_loc_var_$1"
	_job_dir "$var" || return 1
	_link_files "$_made" "$1"
	_add_links "$_made" "$1" ''
	_complete "$_made" "$1" || return 1
	[ -d "${2:-}" ] || return 0
	# Then every entry of the node directory whose name is free: baked files win a shared name.
	set +f
	set -- "$2"/* "$2"/.[!.]* "$2"/..?*
	set -f
	for entry do
		shift
		{ [ -e "$entry" ] || [ -L "$entry" ]; } || continue # an unmatched glob
		[ -e "$_made/${entry##*/}" ] || [ -L "$_made/${entry##*/}" ] || set -- "$@" "$entry"
	done
	[ $# -eq 0 ] || ln -s -- "$@" "$_made/" 2>/dev/null || :
}

_moved() { # $1 loc row just re-pointed: serve again each earlier loc whose directory moved with it
	local row=1 at unserved consumer files
	while [ "$row" -lt "$1" ]; do
		eval "at=\$_loc_at_$row unserved=\$_loc_unserved_$row consumer=\$_loc_consumer_$row files=\$_loc_files_$row"
		_resolve "$row"
		if [ "$consumer" != - ] && [ -n "$files" ] && [ "$_resolved" != "$at" ]; then
			# Reported where it was; what counts now is where its consumer looks.
			_unserved=$((_unserved - ${unserved:-0}))
			_serve_loc "$row"
		fi
		row=$((row + 1))
	done
}

_serve_export() { # $1 loc row, $2 its directory or empty, $3 _serve_at's status: job-local for this job
	local var
	eval "var=\$_loc_var_$1"
	if [ "$3" -eq "$_NOT_A_DIR" ]; then
		_problem "$2" "$_want" "a file where a directory belongs, left alone" "remove that file, or unset $var to get a job-local directory"
		return 0
	fi
	if _merged "$1" "$2"; then
		_export "$var" "$_made"
		if [ -n "$2" ]; then _notes="$_notes; $var=$_made (job-local, $2 left as is: $_reason)"; fi
		return 0
	fi
	_problem "${2:-\$$var (unset)}" "$_want" "${2:+$_reason, and }no job-local directory under ${TMPDIR:-/tmp}" \
		"make ${TMPDIR:-/tmp} writable, or point $var at a writable directory"
}

_serve_under() { # $1 loc row, $2 its directory or empty, $3 _serve_at's status: warn, or go job-local
	local var where fix
	eval "var=\$_loc_var_$1 where=\$_loc_sub_$1"
	if [ -z "$2" ]; then
		_find_uid
		where="\${$var:-...}/$where (no HOME, and no passwd entry for uid $_uid)"
	else
		where=$2
	fi
	case $3 in
	"$_CANNOT_MAKE")
		if ! _is_job_local "$2" && _job_dir "$var"; then
			_export "$var" "$_made"
			_notes="$_notes; $var=$_made (job-local: $where cannot be created)"
			_serve_loc "$1"
			_moved "$1"
			return 0
		fi
		_reason="a location that could not be created or written (read-only, or no permission)"
		fix="point $var at a writable directory, or make ${TMPDIR:-/tmp} writable"
		;;
	"$_NOT_SEEDED") fix="let a job copy the files there (BAKE_SEED=1, writable), or point $var at an empty or job-local directory" ;;
	*)
		_reason="a file where a directory belongs, left alone"
		fix="remove that file, or point $var elsewhere"
		;;
	esac
	_problem "$where" "$_want" "$_reason" "$fix"
}

_serve_loc() { # $1 loc row: serve it where its consumer looks, or report it
	local dir status=0 mode unserved=$_unserved
	eval "mode=\$_loc_mode_$1"
	_resolve "$1"
	dir=$_resolved
	eval "_loc_at_$1=\$dir _loc_unserved_$1=0"
	if [ -n "$dir" ]; then
		_serve_at "$dir" "$1" || status=$?
		[ "$status" -ne "$_SERVED" ] || return 0
	else
		status=$_CANNOT_MAKE _reason=
	fi
	if [ -z "$_reason" ]; then
		case $status in
		"$_NOT_A_DIR") _reason="a file where a directory belongs, left alone" ;;
		*) _reason="a location that could not be created or written (read-only, or no permission)" ;;
		esac
	fi
	_wanted "$1"
	if [ "$mode" = export ]; then
		_serve_export "$1" "$dir" "$status"
	else
		_serve_under "$1" "$dir" "$status"
	fi
	eval "_loc_unserved_$1=\$((_unserved - unserved))"
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

_no_assets() { # "$@" the command: nothing to serve; warn and run the job, or stop it
	local what="BAKE_ASSETS=$_assets: expected the baked asset directory with its bake.serve, saw $_reason"
	local fix="run the image that bake built, or set BAKE_ASSETS to its asset directory"
	if _flag BAKE_VERIFY 0; then
		_say "error: BAKE_VERIFY=1: nothing to verify: $what; $fix; job not started"
		exit 3
	fi
	if [ -n "$_require" ]; then
		_say "error: BAKE_REQUIRE=1: $what; $fix; job not started"
		exit 6
	fi
	_say "warning: $what; no location served, the job may download; $fix"
	[ "$_mode" = run ] && [ $# -gt 0 ] || exit 0
	exec "$@"
}

_display() { # $1 asset path: sets _shown to its name in the ready line
	local asset="$1" dir="${1%/*}" entry
	_shown=$1
	case $asset in
	*/*/*)
		# Nested (a repository's files): its first two components say which.
		dir=${asset#*/}
		_shown=${asset%%/*}/${dir%%/*}
		return 0
		;;
	*/*) ;;
	*) return 0 ;;
	esac
	# An alias link beside the file names it (an <encoding>.<ext> link to a hash-named file).
	set +f
	set -- "$_assets/$dir"/*
	set -f
	for entry do
		if [ -L "$entry" ] && [ "$entry" -ef "$_assets/$asset" ]; then
			entry=${entry##*/}
			_shown=$dir/${entry%.*}
			return 0
		fi
	done
}

_ready() { # the ready line: what is served, and how long it took
	local row=1 files k asset list='' took=''
	while [ "$row" -le "$_nlocs" ]; do
		eval "files=\$_loc_files_$row"
		for k in $files; do
			eval "asset=\$_file_asset_$k"
			_display "$asset"
			case "$list, " in *", $_shown, "*) ;; *) list="$list, $_shown" ;; esac
		done
		row=$((row + 1))
	done
	_clock_ms
	if [ -n "$_now_ms" ] && [ -n "$_t0" ]; then took=" in $((_now_ms - _t0)) ms"; fi
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

_main() {
	local row consumer files
	_t0='' _unserved=0 _notes='' _exports='' _njobdirs=0 _require='' _seed=''
	if _flag BAKE_QUIET 0; then _quiet=1; else
		_quiet=
		_clock_ms
		_t0=$_now_ms
	fi
	_parse_args "$@"
	if _flag BAKE_REQUIRE 0; then _require=1; fi
	if _flag BAKE_SEED 1; then _seed=1; fi
	_assets=${BAKE_ASSETS:-/opt/bake/assets}
	case $_assets in /*) ;; *) _assets=$PWD/$_assets ;; esac
	_load_serve || _no_assets "$@"
	if _flag BAKE_VERIFY 0; then _verify; fi
	row=1
	while [ "$row" -le "$_nlocs" ]; do
		eval "consumer=\$_loc_consumer_$row files=\$_loc_files_$row"
		# `-` rows only resolve a fallback; a consumer with no baked file keeps its locations as they are.
		if [ "$consumer" != - ] && [ -n "$files" ]; then _serve_loc "$row"; fi
		row=$((row + 1))
	done
	if [ "$_unserved" -gt 0 ] && [ -n "$_require" ]; then
		_say "error: BAKE_REQUIRE=1: $_unserved location(s) above cannot serve the baked files from $_assets; fix them or unset BAKE_REQUIRE; job not started"
		exit 6
	fi
	[ -n "$_quiet" ] || _ready
	if [ "$_mode" = env ]; then
		_print_env
		exit 0
	fi
	[ $# -gt 0 ] || exit 0
	exec "$@"
}

_main "$@"

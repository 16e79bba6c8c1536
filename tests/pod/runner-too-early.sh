#!/bin/sh
# The mistake runner.sh avoids: bake's line before the per-job exports, whose new
# locations then hold nothing. The job must notice.
#   runner-too-early.sh JOB_DIR COMMAND [ARG...]
set -eu
job_dir=$1
shift
eval "$(bake-entrypoint --print-env)"

mkdir -p "$job_dir/cache" "$job_dir/tmp"
export XDG_CACHE_HOME="$job_dir/cache"
export TMPDIR="$job_dir/tmp"
exec "$@"

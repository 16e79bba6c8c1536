#!/bin/sh
# A native pod's runner, shaped like vLLM's ROCm runner on MI300 (Docker off): after its own
# set-up it exports a per-job XDG_CACHE_HOME and TMPDIR, which bypasses anything linked
# earlier; then bake's one line; then the job.
#   runner.sh JOB_DIR COMMAND [ARG...]
set -eu
job_dir=$1
shift
mkdir -p "$job_dir/cache" "$job_dir/tmp"
export XDG_CACHE_HOME="$job_dir/cache"
export TMPDIR="$job_dir/tmp"

# bake: serve the baked assets at this job's locations. After the exports above.
bake_env=$(bake-entrypoint --print-env) || exit; eval "$bake_env"

exec "$@"

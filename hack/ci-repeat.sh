#!/usr/bin/env bash
# Runs .ci/run N times in a row, each on a fresh clone of one commit, and
# stops at the first failure: how "make test passes N times in a row on a
# fresh clone" is checked. Usage: hack/ci-repeat.sh [N] [commit]
# Results (one line per run: commit, run, exit code, seconds) go to
# $RESULTS (default /tmp/ci-repeat.results); each run's log beside it.
set -uo pipefail
n=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse "${2:-HEAD}")
results=${RESULTS:-/tmp/ci-repeat.results}
for i in $(seq 1 "$n"); do
  dir=$(mktemp -d /tmp/ci-repeat.XXXXXX)
  git clone -q "$repo" "$dir/src" && git -C "$dir/src" checkout -q "$commit" || exit 1
  t0=$(date +%s)
  (cd "$dir/src" && .ci/run) >"$results.$i.log" 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) ${commit:0:7} run $i/$n rc=$rc $(( $(date +%s) - t0 ))s" >>"$results"
  rm -rf "$dir"
  [ "$rc" -eq 0 ] || exit "$rc"
done

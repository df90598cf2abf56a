#!/usr/bin/env bash
# Runs the fuzz targets of a sanitizer build (make fuzz): each for SECONDS, one after another, from
# its committed seeds (tests/fuzz/corpus/NAME) and what earlier runs found (BUILD/tests/fuzz/corpus/
# NAME). Prints a table: executions, coverage, corpus and the result of each. A crash, hang or leak
# leaves its input in BUILD/tests/fuzz/crashes/ and makes the script exit 1.
#
#   scripts/fuzz.sh BUILD SECONDS [NAME...]     (NAME: token_stream, blend, ...; all by default)
#   FUZZ_JOBS=N runs N targets at a time (default 1).
set -euo pipefail

build=${1:?usage: scripts/fuzz.sh BUILD SECONDS [NAME...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD SECONDS [NAME...]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
fuzz_build="$build/tests/fuzz"
seeds="$root/tests/fuzz/corpus"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/fuzz_*.cpp; do
    n=$(basename "$f" .cpp)
    [ "$n" = fuzz_input ] && continue
    names+=("${n#fuzz_}")
  done
fi
logs="$fuzz_build/logs"
mkdir -p "$logs" "$fuzz_build/crashes"
# Inputs are written under TMPDIR, one directory per process; a target that crashes cannot remove
# its own, so they all go to one place of this run, removed at the end.
mkdir -p "$fuzz_build/tmp"
TMPDIR=$(mktemp -d "$fuzz_build/tmp/run.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

run_one() {
  local name=$1 target="$fuzz_build/fuzz_$1"
  [ -x "$target" ] || { echo "fuzz.sh: $target is not built (make sanitize-build)" >&2; return 1; }
  mkdir -p "$fuzz_build/corpus/$name"
  local rc=0
  "$target" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -max_total_time="$seconds" -artifact_prefix="$fuzz_build/crashes/$name-" \
    "$fuzz_build/corpus/$name" "$seeds/$name" >"$logs/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$name.rc"
  return "$rc"
}

status=0
pids=()
for name in "${names[@]}"; do
  run_one "$name" &
  pids+=($!)
  if [ ${#pids[@]} -ge "${FUZZ_JOBS:-1}" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done

printf '%-18s %8s %12s %8s %8s %8s  %s\n' target seconds executions cov features corpus result
for name in "${names[@]}"; do
  log="$logs/$name.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: //p' "$log" | tail -1)
  done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$done_line")
  # A target that exits with no report (stderr silenced at the time) still fails by its status.
  rc=$(cat "$logs/$name.rc" 2>/dev/null || echo '?')
  result=ok
  if [ "$rc" != 0 ]; then
    why=$(grep -m1 -E 'ERROR: |SUMMARY: |deadly signal|ALARM|out-of-memory' "$log" | cut -c1-80 || true)
    result="FAILED (exit $rc): ${why:-no report; see its log}"
  fi
  printf '%-18s %8s %12s %8s %8s %8s  %s\n' "$name" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
done
[ "$status" -eq 0 ] || echo "fuzz.sh: a target failed; its log is in $logs, its input in $fuzz_build/crashes" >&2
exit "$status"

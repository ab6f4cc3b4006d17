#!/usr/bin/env bash
# Runs libFuzzer targets: scripts/fuzz.sh SECONDS BIN...
# Each BIN runs for SECONDS on a scratch corpus under build/fuzz-corpus/<name> seeded from fuzz/corpus/<name>
# and from the directories listed in fuzz/corpus/<name>.from (the repository's seeds are never modified).
# Crash inputs are kept in build/fuzz-artifacts/<name>/.
# Prints one line per target: "fuzz: NAME EXECS execs in SECONDS s, N crashes"; exits 1 if any crashed.
# FUZZ_JOBS targets run at a time (default: the number of CPUs; each target is one process on one core, with
# its own corpus, artifacts and log, so they share nothing).
set -u
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh SECONDS BIN..." >&2
  exit 2
fi
secs=$1
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${TRUN_BUILD:-$repo/build}
# Recoverable UBSan reports (the fuzz build does not use -fno-sanitize-recover) count as crashes.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
fuzz_one() { # fuzz_one BIN: one target; its crash report (if any) into $failed_dir/NAME, said at the end
  local bin=$1 name seeds corpus artifacts log before start rc took execs crashes
  name=$(basename "$bin")
  seeds=$repo/fuzz/corpus/$name
  corpus=$build/fuzz-corpus/$name
  artifacts=$build/fuzz-artifacts/$name
  log=$build/fuzz-logs/$name.log
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  if [ -d "$seeds" ]; then cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true; fi
  # fuzz/corpus/<name>.from: more seed directories (one per line, relative to the repository), e.g. fixtures.
  if [ -f "$seeds.from" ]; then
    while read -r dir; do
      [ -n "$dir" ] && { cp -n "$repo/$dir"/* "$corpus"/ 2>/dev/null || true; }
    done <"$seeds.from"
  fi
  before=$(find "$artifacts" -type f | wc -l)
  start=$(date +%s)
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  crashes=$(($(find "$artifacts" -type f | wc -l) - before))
  if [ $rc -ne 0 ] && [ $crashes -eq 0 ]; then crashes=1; fi
  if [ $crashes -ne 0 ]; then
    {
      echo "fuzz: $name failed (exit $rc); last lines of $log:"
      tail -n 40 "$log" | sed 's/^/    /'
      ls "$artifacts" | sed 's/^/    artifact: /'
    } >"$failed_dir/$name"
  fi
  echo "fuzz: $name ${execs:-0} execs in $took s, $crashes crashes"
}

jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
failed_dir=$build/fuzz-logs/failed
rm -rf "$failed_dir"
mkdir -p "$failed_dir"
running=0
for bin in "$@"; do
  if [ $running -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$bin" &
  running=$((running + 1))
done
wait
failed=0
for f in "$failed_dir"/*; do
  [ -e "$f" ] || continue
  cat "$f" >&2
  failed=1
done
exit $failed

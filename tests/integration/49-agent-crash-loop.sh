#!/usr/bin/env bash
# runner: lock=29400
# Restarts that know when to stop (trun --standalone --nproc-per-node 2; torch 1.13 workers of
# tests/helpers/startup_fail.py: they record the attempt, import torch (parts 1 and 2), then fail with an import
# error):
#  1. The defaults (--restart-backoff 1, --crash-loop 3:60) with --max-restarts 10: three failed rounds, the
#     first restart at once and a wait of 1 s before the second, then "crash loop" and exit 5 (do not
#     requeue); the report names the import error; 2 restart events, not 10.
#  2. --restart-backoff 0 --crash-loop 0 --max-restarts 3 runs 4 attempts and exits 1, as real torchrun 1.13
#     (tests/tools/torchrun113.py --max_restarts 3) does with the same script: the attempts are counted for both.
#  3. Requeues count: SLURM_RESTART_COUNT=2 with --max-restarts 3 leaves 1 restart (2 attempts) and then exits
#     5 naming SLURM_RESTART_COUNT; PET_RESTART_OFFSET=1 (as a JobSet's restart-attempt label through the
#     downward API) leaves 2 (3 attempts), exit 5; SLURM_RESTART_COUNT=0 behaves as no requeue (exit 1).
#  4. Slow failures are no crash loop: --crash-loop 2:1 with workers that fail after 2 s, --max-restarts 2:
#     3 attempts, exit 1.
#  5. A stop signal during the back-off (--restart-backoff 600, which starts after the second failure) ends
#     the wait: trun exits 1 after 2 attempts (the run_pg safety limit is far below 600 s).
#  6. Bad values exit 2 naming the option: --crash-loop 3, --restart-backoff -1, PET_CRASH_LOOP=x:1,
#     --restart-offset -2.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
script=$repo/tests/helpers/startup_fail.py
export PYTHON_EXEC=$host_py

# attempts NAME WANT: the script recorded WANT distinct attempts in NAME.
attempts() {
  local n
  n=$(cut -d' ' -f2 "$tmp/$1.count" 2>/dev/null | sort -u | wc -l)
  echo "    $1: $n attempt(s)"
  [ "$n" -eq "$2" ] || fail "$1: $n attempts, want $2"
}
has() { grep -Eq -- "$2" "$tmp/$1.err" || fail "$1: stderr has no line matching /$2/"; }
T=(--standalone --nproc-per-node 2)

# ---- 1. the defaults stop a crash loop ----------------------------------------------------------------------
run_case defaults 5 run_pg "$trun" "${T[@]}" --max-restarts 10 --events "$tmp/defaults.ev" "$script" "$tmp/defaults.count" 0
attempts defaults 3
has defaults 'waiting 1\.0 s before the restart \(--restart-backoff\)'
# The first failure restarts at once, the second waits 1 s: one wait in all.
n=$(grep -c 'waiting .* before the restart' "$tmp/defaults.err" || true)
[ "$n" -eq 1 ] || fail "defaults: $n back-off waits, want 1 (none after the first failure, 1 s after the second)"
sed -n '/restarting the workers (attempt 1/,$p' "$tmp/defaults.err" | head -n 2 | grep -q 'waiting' &&
  fail "defaults: waited before the first restart (a one-off failure restarts at once)"
has defaults 'crash loop: 3 failed rounds in a row, each within 60 s .*exit 5 \(do not requeue\)'
expect_root defaults "cause     : the script failed at start-up: ModuleNotFoundError: No module named 'nonexistent_module_for_trun_test'"
n=$(grep -c '"event": *"restart"' "$tmp/defaults.ev" || true)
[ "$n" -eq 2 ] || fail "defaults: $n restart events, want 2"

# ---- 2. back-off 0 and no crash-loop check: torchrun's count ----------------------------------------------------
run_case torchrun_like 1 run_pg "$trun" "${T[@]}" --max-restarts 3 --restart-backoff 0 --crash-loop 0 "$script" "$tmp/torchrun_like.count" 0
attempts torchrun_like 4
grep -q 'waiting .* before the restart' "$tmp/torchrun_like.err" && fail "torchrun_like: waited with --restart-backoff 0"
run_case torchrun113 1 run_pg "$host_py" "$repo/tests/tools/torchrun113.py" --standalone --nproc_per_node 2 --max_restarts 3 "$script" "$tmp/torchrun113.count" 0
attempts torchrun113 4

# Parts 3-5 count rounds and waits: their workers skip the torch import (STARTUP_FAIL_TORCH=0; parts 1 and 2
# keep it: a real start-up, and the same script as torchrun 1.13's).
export STARTUP_FAIL_TORCH=0

# ---- 3. requeues count against --max-restarts ----------------------------------------------------------------------
run_case slurm2 5 run_pg env SLURM_RESTART_COUNT=2 "$trun" "${T[@]}" --max-restarts 3 --restart-backoff 0 --crash-loop 0 "$script" "$tmp/slurm2.count" 0
attempts slurm2 2
has slurm2 'SLURM_RESTART_COUNT=2: the job used 2 restart\(s\) before this run; 1 of --max-restarts 3 left'
has slurm2 "the job's --max-restarts 3 are spent, 2 of them by requeues \(SLURM_RESTART_COUNT\): exit 5 \(do not requeue\)"
run_case jobset1 5 run_pg env PET_RESTART_OFFSET=1 SLURM_RESTART_COUNT=9 "$trun" "${T[@]}" --max-restarts 3 --restart-backoff 0 --crash-loop 0 "$script" "$tmp/jobset1.count" 0
attempts jobset1 3
has jobset1 '\(--restart-offset\): exit 5'
run_case slurm0 1 run_pg env SLURM_RESTART_COUNT=0 "$trun" "${T[@]}" --max-restarts 1 --restart-backoff 0 "$script" "$tmp/slurm0.count" 0
attempts slurm0 2

# ---- 4. slow failures are no crash loop ----------------------------------------------------------------------------
run_case slow 1 run_pg "$trun" "${T[@]}" --max-restarts 2 --crash-loop 2:1 "$script" "$tmp/slow.count" 2
attempts slow 3
grep -q 'crash loop' "$tmp/slow.err" && fail "slow: failures after 2 s taken for a crash loop with a 1 s window"
grep -q 'waiting .* before the restart' "$tmp/slow.err" && fail "slow: waited after failures outside the window"

# ---- 5. a stop signal ends the back-off -----------------------------------------------------------------------------
echo "== backoff_signal"
setsid "$trun" "${T[@]}" --max-restarts 5 --restart-backoff 600 "$script" "$tmp/sig.count" 0 >"$tmp/sig.out" 2>"$tmp/sig.err" &
pid=$!
_bg_pgids+=("$pid")
for _ in $(seq 1200); do grep -q 'waiting 600\.0 s before the restart' "$tmp/sig.err" && break; sleep 0.1; done
grep -q 'waiting 600\.0 s before the restart' "$tmp/sig.err" || fail "backoff_signal: trun never started its back-off"
t0=$(date +%s.%N)
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
echo "    trun exited $rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') s after SIGTERM (back-off 600 s)"
[ $rc -eq 1 ] || fail "backoff_signal: exited $rc after SIGTERM in the back-off, want 1"
attempts sig 2 # the first failure restarts at once; the back-off follows the second

# ---- 6. bad values -------------------------------------------------------------------------------------------------
bad() {
  local want=$1 rc=0
  shift
  "$@" >"$tmp/bad.out" 2>"$tmp/bad.err" || rc=$?
  [ $rc -eq 2 ] || fail "bad: '$*' exited $rc, want 2"
  grep -q -- "$want" "$tmp/bad.err" || fail "bad: '$*': stderr lacks '$want': $(cat "$tmp/bad.err")"
  echo "    bad: $(head -1 "$tmp/bad.err")"
}
bad "--crash-loop '3' must be K:SECONDS" "$trun" --crash-loop 3 "$script"
bad "--restart-backoff '-1' must be 0-3600 seconds" "$trun" --restart-backoff -1 "$script"
bad "--crash-loop 'x:1'" env PET_CRASH_LOOP=x:1 "$trun" "$script"
bad "--restart-offset '-2'" "$trun" --restart-offset -2 "$script"
echo PASS

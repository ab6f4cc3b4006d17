#!/usr/bin/env bash
# --warm-start across a restart (trun --standalone --nproc-per-node 2 --max-restarts 1, torch 1.13, gloo):
#  - the first workers start warm (the pool was started with the agent);
#  - right after they start, the pool is refilled: one fresh pool process per slot;
#  - one of them is killed (SIGKILL) before use: the agent says so and starts another;
#  - local rank 1 then crashes (exit 3): the restarted workers start warm, from the pool processes present
#    at that moment (the replacement included: same pids), and all-reduce again; trun exits 0;
#  - the metrics say 4 warm starts, 0 cold; when trun ends no pool process is left;
#  - a pool process still importing is never handed a worker (issue 41): a --warm-start-modules module that
#    fails slowly (it raises once the workers are due to start) makes the slot start cold, with the reason,
#    and the job succeeds (it used to exit 3 with no output);
#  - the start waits for a slow pool process on the loop, and the handover of 1 MiB of script arguments
#    does not block it: the metrics endpoint answers while the start waits; the worker then starts warm with
#    all its arguments.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
out=$tmp/out
mkdir -p "$out"

# wait_until SECONDS CMD...: polls CMD every 0.1 s.
wait_until() {
  local limit=$1 i
  shift
  for ((i = 0; i < limit * 10; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}
# pool_pids: the agent's children that are pool processes not yet handed over (their cmdline carries the
# bootstrap's marker; a worker's does too, so the workers of the current attempt are left out).
pool_pids() {
  local p
  for p in $(pgrep -P "$agent" 2>/dev/null); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'trun-warm-pool' || continue
    grep -qx "$p" "$tmp/workers" 2>/dev/null && continue
    echo "$p"
  done | sort -n
}
count_is() { [ "$(pool_pids | wc -l)" -eq "$1" ]; }
started() { [ -f "$out/start.$1.0" ] && [ -f "$out/start.$1.1" ]; }

port=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "== trun --warm-start --max-restarts 1 (metrics on port $port)"
PYTHON_EXEC=$host_py setsid "$trun" --warm-start --standalone --nproc-per-node 2 --max-restarts 1 \
  --metrics-port "$port" "$repo/tests/helpers/warmcrash.py" "$out" >"$tmp/trun.out" 2>"$tmp/trun.err" &
agent=$!
_bg_pgids+=("$agent")
show() {
  sed 's/^/    out| /' "$tmp/trun.out"
  sed 's/^/    err| /' "$tmp/trun.err"
}

wait_until 180 started 0 || { show; fail "the first workers did not start in 180 s"; }
for lr in 0 1; do
  grep -q '^preloaded=True ' "$out/start.0.$lr" || fail "attempt 0 local rank $lr did not start warm: $(cat "$out/start.0.$lr")"
  sed -n 's/.* pid=//p' "$out/start.0.$lr" >>"$tmp/workers"
done
wait_until 60 count_is 2 || { show; fail "the pool was not refilled after the first start: $(pool_pids | xargs)"; }
victim=$(pool_pids | head -1)
echo "killing pool process $victim before use"
kill -KILL "$victim"
wait_until 60 grep -q "pool process $victim was killed by signal 9 before use; starting another" "$tmp/trun.err" ||
  { show; fail "the agent did not say it replaces pool process $victim"; }
wait_until 60 count_is 2 || { show; fail "pool process $victim was not replaced: $(pool_pids | xargs)"; }
pool=$(pool_pids | xargs)
echo "pool before the crash: $pool"
case " $pool " in *" $victim "*) fail "the killed pool process $victim is still listed" ;; esac

touch "$out/go" # local rank 1 crashes
wait_until 180 started 1 || { show; fail "the workers did not restart in 180 s"; }
restarted=""
for lr in 0 1; do
  grep -q '^preloaded=True ' "$out/start.1.$lr" || fail "attempt 1 local rank $lr did not start warm: $(cat "$out/start.1.$lr")"
  restarted="$restarted $(sed -n 's/.* pid=//p' "$out/start.1.$lr")"
done
[ "$(echo $restarted | tr ' ' '\n' | sort -n | xargs)" = "$pool" ] ||
  fail "the restarted workers' pids ($restarted) are not the pool's ($pool)"
metrics=$(curl -s "http://127.0.0.1:$port/metrics" || true)
touch "$out/end"
rc=0
wait "$agent" || rc=$?
show
[ $rc -eq 0 ] || fail "trun exited $rc, want 0"
grep -q "crashing attempt 0 on purpose" "$tmp/trun.out" || fail "local rank 1 did not crash attempt 0"
for r in 0 1; do [ -f "$out/ok.1.$r" ] || fail "rank $r did not all-reduce in attempt 1"; done
grep -q 'trun_worker_starts_total{start="warm"} 4' <<<"$metrics" &&
  grep -q 'trun_worker_starts_total{start="cold"} 0' <<<"$metrics" ||
  fail "the metrics do not say 4 warm and 0 cold starts: $(grep worker_starts <<<"$metrics")"
for p in $pool $victim; do
  [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null && fail "process $p outlived trun"
done

# slow CASE MODULE trun-args...: trun --warm-start (debug log) in the background with a warm module beside
# $tmp/CASE/main.py that waits for $tmp/CASE/release; the module is released once the agent is about to start
# the workers (its doctor line: the start follows at once) and the agent has had a moment to reach it.
# Before the release, "$tmp/CASE/during" (a command, if present) runs. trun's exit code in $tmp/CASE/rc.
slow() {
  local case=$1 module=$2 d=$tmp/$1
  shift 2
  echo "== $case: trun --warm-start --warm-start-modules $module (it waits for a release)"
  TRUN_LOG_LEVEL=debug PYTHON_EXEC=$host_py setsid "$trun" --warm-start --warm-start-modules "$module" \
    --standalone --nproc-per-node 1 "$@" >"$d/trun.out" 2>"$d/trun.err" &
  local pid=$! rc=0
  _bg_pgids+=("$pid")
  wait_until 180 grep -qs "doctor:" "$d/trun.err" || {
    cat "$d/trun.err"
    fail "$case: the agent did not reach the workers' start in 180 s"
  }
  sleep 1 # not a check: the start comes right after the doctor line
  [ ! -f "$d/during" ] || . "$d/during"
  touch "$d/release"
  wait "$pid" || rc=$?
  echo "$rc" >"$d/rc"
  grep -v '^trun: debug' "$d/trun.err" | sed 's/^/    err| /' || true
}
# mkcase CASE MODULE FAILS(0|1): $tmp/CASE with main.py and the warm module MODULE (raising when FAILS=1).
mkcase() {
  local d=$tmp/$1
  mkdir -p "$d"
  printf 'import os, time\ndeadline = time.time() + 120\nwhile not os.path.exists("%s/release") and time.time() < deadline:\n    time.sleep(0.05)\nif %s:\n    raise RuntimeError("warm module failed on purpose")\n' \
    "$d" "$3" >"$d/$2.py"
  printf 'import sys\nprint("preloaded=%%s" %% ("%s" in sys.modules))\nprint("argv bytes %%d" %% sum(len(a) for a in sys.argv[1:]))\n' \
    "$2" >"$d/main.py"
}

# A warm module that fails slowly: the pool process is still importing when the worker is due; it is not
# handed the worker, its import fails, the worker starts cold and the job succeeds.
mkcase slowfail warmslowfail 1
slow slowfail warmslowfail "$tmp/slowfail/main.py"
[ "$(cat "$tmp/slowfail/rc")" = 0 ] ||
  fail "slowfail: trun exited $(cat "$tmp/slowfail/rc"), want 0 (a pool process handed the worker before it was ready?)"
grep -qx "preloaded=False" "$tmp/slowfail/trun.out" || fail "slowfail: the worker did not start cold: $(cat "$tmp/slowfail/trun.out")"
grep -q "local rank 0 starts cold: the pool process could not get ready: import warmslowfail failed: RuntimeError: warm module failed on purpose" \
  "$tmp/slowfail/trun.err" || fail "slowfail: no line saying local rank 0 starts cold because its import failed"

# 1 MiB of script arguments and a slow pool process: the agent waits for it on the loop and the handover does
# not block: the metrics endpoint answers meanwhile; the worker starts warm with every byte of its arguments.
mkcase large warmslow 0
big=$("$host_py" -c 'print(" ".join(["x" * 65536] * 16))')
port2=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$tmp/large/during" <<EOF
curl -s --max-time 15 "http://127.0.0.1:$port2/metrics" >"$tmp/large/metrics" || true
EOF
slow large warmslow --metrics-port "$port2" "$tmp/large/main.py" $big
grep -q '^trun_' "$tmp/large/metrics" ||
  fail "large: the metrics endpoint did not answer while the worker's start waited for its pool process (the loop was blocked)"
[ "$(cat "$tmp/large/rc")" = 0 ] || fail "large: trun exited $(cat "$tmp/large/rc"), want 0"
grep -qx "preloaded=True" "$tmp/large/trun.out" && grep -qx "argv bytes 1048576" "$tmp/large/trun.out" ||
  fail "large: the worker did not start warm with its 1 MiB of arguments: $(cut -c1-200 "$tmp/large/trun.out")"

# --warm-start-cuda: each pool process makes the CUDA primary context of its worker's device (LOCAL_RANK)
# through the driver (here the fake one, build/libcuda-nccl-fake.so, which logs each retain with its pid)
# before it is handed the worker: every worker's pid has one retain of its own local rank.
echo "== --warm-start-cuda (fake CUDA driver)"
mkdir -p "$tmp/cuda"
printf 'import os, sys\nopen(os.path.join(sys.argv[1], "worker." + os.environ["LOCAL_RANK"]), "w").write("%%d\\n" %% os.getpid())\n' \
  >"$tmp/cuda/w.py"
rc=0
TRUN_CUDA_DRIVER_LIBRARY=$build/libcuda-nccl-fake.so TRUN_FAKE_CUDA_LOG=$tmp/cuda/log PYTHON_EXEC=$host_py \
  "$trun" --warm-start --warm-start-cuda --warm-start-modules json --standalone --nproc-per-node 2 \
  "$tmp/cuda/w.py" "$tmp/cuda" >"$tmp/cuda/out" 2>"$tmp/cuda/err" || rc=$?
[ $rc -eq 0 ] || fail "--warm-start-cuda: trun exited $rc: $(cat "$tmp/cuda/err")"
for lr in 0 1; do
  wpid=$(cat "$tmp/cuda/worker.$lr")
  grep -qx "pid $wpid retain $lr cvd -" "$tmp/cuda/log" 2>/dev/null ||
    fail "--warm-start-cuda: worker $lr (pid $wpid) did not find its device's context made by its pool process: $(cat "$tmp/cuda/log" 2>/dev/null)"
done
echo PASS

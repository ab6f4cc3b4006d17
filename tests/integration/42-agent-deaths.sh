#!/usr/bin/env bash
# runner: lock=29400
# Every death named (trun --standalone --nproc-per-node 2, torch 1.13 workers of tests/helpers/death_worker.py;
# local rank 1 just waits):
#  1. OOM kill: trun and its workers in a memory cgroup of their own (this test makes it: cgroup v1's memory
#     controller or cgroup v2 with memory enabled, whichever the box offers; neither => FAIL) limited to
#     768 MiB without swap; rank 0 allocates torch tensors until the kernel's OOM killer kills it. The report's
#     root cause keeps torchrun's "exitcode  : -9" and adds "cause     : killed by the kernel's OOM killer"
#     naming the cgroup and its limit; the console says it; the "failure" event has cause_kind "oom_kill".
#     Real torchrun 1.13 (tests/tools/torchrun113.py) runs in the same cgroup and its report is printed for
#     comparison (it says "Signal 9 (SIGKILL)" and nothing else: checked, so that a change shows here).
#     Rank 1 ignores SIGTERM, so trun's own SIGKILL after --shutdown-timeout ends it: that is never an OOM
#     kill (only one cause line of the report names the OOM killer), though the cgroup's counter moved.
#  1b. The same OOM kill with rank 1 SIGKILLing itself when trun's SIGTERM comes: in a cgroup where another
#     process was OOM-killed, rank 1 is not taken for an OOM kill (no kernel record names it).
#  2. A worker that SIGKILLs itself in the same cgroup: "killed by SIGKILL", "no OOM kill recorded" (the
#     cgroup's counter did not move): a SIGKILL alone is not taken for memory.
#  2b. A worker (root) that writes a forged "Killed process <its pid>" record to /dev/kmsg and SIGKILLs
#     itself: /dev/kmsg gives any write facility 1 (user), only the kernel's facility 0 is believed.
#  Evidence: in the initial PID namespace the kernel's record names the worker's pid (certain). Inside a PID
#  namespace (a pod; the root of `make check-fresh`) the record names the host's pid: trun says "likely
#  killed by the kernel's OOM killer", matched by the time of the death. Cases 1, 1b, 2 and 2b are run again
#  under `unshare --pid --fork --mount-proc` (TRUN_T42_INNER=1) and expect the words of that namespace.
#  3. An import error at start-up: cause "the script failed at start-up: ModuleNotFoundError: ...". Real
#     torch error texts (tests/fixtures/causes) written to stderr are named: a CUDA OOM read from the console
#     stream, an NCCL error read back from a --redirects 2 log file.
#  4. A worker SIGKILL cannot end: rank 1 is frozen in a cgroup v1 freezer (the kernel shows it in state D,
#     and it ignores SIGKILL until thawed); rank 0 then exits 1; after --shutdown-timeout 1 and SIGKILL trun
#     waits 10 s, says rank 1 is stuck in state D, stops waiting and exits 3 (this node is unhealthy), with
#     cause_kind "stuck" in its report. No freezer => FAIL. The test thaws it afterwards.
# Cgroups are removed even on failure. Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
worker=$repo/tests/helpers/death_worker.py
export PYTHON_EXEC=$host_py

# ---- cgroups ------------------------------------------------------------------------------------------
memcg="" freezer="" inner_cg=""
inner=${TRUN_T42_INNER:-0}
tag=${TRUN_T42_TAG:-$$}
[ "$inner" = 1 ] && tag=$tag-ns
cleanup_cgroups() {
  local cg
  for cg in "$memcg" "$freezer" "$inner_cg"; do
    [ -n "$cg" ] && [ -d "$cg" ] || continue
    [ -f "$cg/freezer.state" ] && echo THAWED >"$cg/freezer.state" 2>/dev/null
    for _ in $(seq 50); do # the processes end once thawed / killed
      [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ] && break
      xargs -r kill -KILL <"$cg/cgroup.procs" 2>/dev/null || true
      sleep 0.1
    done
    rmdir "$cg" 2>/dev/null || echo "warning: could not remove $cg" >&2
  done
}
trap 'cleanup_cgroups; _agent_cleanup' EXIT

# The memory cgroup this test makes: under this process's own (v2 with memory on, else v1's memory).
v2mnt=$(awk '$9 == "cgroup2" {print $5; exit}' /proc/self/mountinfo)
v1mnt=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ {print $5; exit}' /proc/self/mountinfo)
v2path=$(sed -n 's/^0:://p' /proc/self/cgroup)
v1path=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3; exit}' /proc/self/cgroup)
if [ -n "$v2mnt" ] && grep -qw memory "$v2mnt$v2path/cgroup.subtree_control" 2>/dev/null; then
  memcg=${v2mnt%/}${v2path%/}/trun-42-$tag
  mkdir "$memcg" || fail "cannot create the cgroup v2 $memcg"
  echo $((768 << 20)) >"$memcg/memory.max" || fail "cannot set $memcg/memory.max"
  echo 0 >"$memcg/memory.swap.max" 2>/dev/null || true
elif [ -n "$v1mnt" ] && [ -n "$v1path" ]; then
  memcg=$v1mnt${v1path%/}/trun-42-$tag
  mkdir "$memcg" || fail "cannot create the cgroup v1 memory group $memcg"
  echo $((768 << 20)) >"$memcg/memory.limit_in_bytes" || fail "cannot set $memcg/memory.limit_in_bytes"
  echo 0 >"$memcg/memory.swappiness" 2>/dev/null || true
else
  fail "this box offers neither cgroup v2 with the memory controller nor cgroup v1's memory controller"
fi
echo "memory cgroup: $memcg (limit 768 MiB)"

# in_memcg CMD...: runs CMD inside the memory cgroup (its own process group, the safety limit of run_pg).
in_memcg() { run_pg sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$memcg" "$@"; }

# expect_event NAME KIND: the events file of NAME has a "failure" event with cause_kind KIND.
expect_event() {
  "$host_py" - "$tmp/$1.events" "$2" <<'PY' || fail "$1: no failure event with cause_kind $2"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f = [e for e in ev if e.get("event") == "failure"]
print("    failure event:", json.dumps(f[-1]) if f else None)
sys.exit(0 if f and f[-1].get("cause_kind") == sys.argv[2] and f[-1].get("cause") else 1)
PY
}
trun_args=(--standalone --nproc-per-node 2 --shutdown-timeout 1 --no-imds)

# ---- 1. the OOM killer ------------------------------------------------------------------------------------
# The kernel's record names the worker's pid only in the initial PID namespace; inside one, trun says likely.
if [ "$(stat -L -c %i /proc/self/ns/pid)" = 4026531836 ]; then
  echo "in the initial PID namespace: the kernel's record names the worker (certain)"
  likely=""
else
  echo "inside a PID namespace: the kernel's record names the host's pid (likely, matched by time)"
  likely="likely "
fi
kmsg_readable() { [ -r /dev/kmsg ] && dd if=/dev/kmsg of=/dev/null bs=8192 count=1 iflag=nonblock 2>/dev/null; }
kmsg_readable || fail "/dev/kmsg cannot be read here: the kernel's OOM records are the evidence this test checks"
oom_count() {
  local f=$memcg/memory.events
  [ -f "$f" ] || f=$memcg/memory.oom_control
  awk '$1 == "oom_kill" {print $2}' "$f"
}
# oom_case NAME RANK1: rank 0 is OOM-killed; rank 1 (TRUN_T42_RANK1) ends otherwise and is not called OOM.
oom_case() {
  local name=$1 before after n
  before=$(oom_count)
  mkdir -p "$tmp/d_$name"
  run_case "$name" 1 in_memcg env TRUN_T42_RANK1="$2" "$trun" "${trun_args[@]}" --events "$tmp/$name.events" "$worker" oom "$tmp/d_$name"
  after=$(oom_count)
  echo "    the cgroup's oom_kill counter: $before -> $after"
  [ "$after" -gt "$before" ] || fail "$name: the kernel's OOM killer did not act in $memcg (counter $before -> $after)"
  expect_root "$name" 'exitcode  : -9 \(pid' "cause     : ${likely}killed by the kernel's OOM killer \(out of memory in memory cgroup $memcg, limit 768 MiB\)" 'rank      : 0 \(local_rank: 0\)' 'kernel: .*Killed process [0-9]+ \(python'
  grep -q "root cause: rank 0 (local 0, pid [0-9]*) on .*: ${likely}killed by the kernel's OOM killer" "$tmp/$name.err" || fail "$name: the console line naming the OOM kill is missing"
  expect_event "$name" oom_kill
  # rank 1 died by SIGKILL in the same cgroup after the OOM kill: not an OOM kill.
  grep -A1 'rank      : 1 (local_rank: 1)' "$tmp/$name.err" | grep -q 'exitcode  : -9 (pid' ||
    fail "$name: rank 1 did not end by SIGKILL (the case tests nothing)"
  n=$(grep -c "cause     : .*killed by the kernel's OOM killer" "$tmp/$name.err" || true)
  [ "$n" = 1 ] || fail "$name: $n ranks are named as killed by the OOM killer, want only rank 0 (rank 1 was SIGKILLed by ${3})"
}
oom_case oom ignore_term "trun's teardown"
grep -q "rank 1 (local 1, pid [0-9]*) still runs 1 s after the stop signal: sending SIGKILL" "$tmp/oom.err" ||
  fail "oom: trun did not SIGKILL rank 1 after --shutdown-timeout"
oom_case oom_selfkill selfkill "itself"

if [ "$inner" != 1 ]; then
# torchrun 1.13 in the same cgroup, for the comparison (its words are printed; it names a signal, no cause).
mkdir -p "$tmp/d1t"
run_case torchrun_oom 1 in_memcg "$host_py" "$repo/tests/tools/torchrun113.py" --standalone --nproc_per_node 2 "$worker" oom "$tmp/d1t"
grep -q 'Signal 9 (SIGKILL) received by PID' "$tmp/torchrun_oom.err" || fail "torchrun 1.13's report changed: no 'Signal 9 (SIGKILL)'"
echo "    torchrun 1.13 says: $(grep -m1 -o 'Signal 9 (SIGKILL) received by PID [0-9]*' "$tmp/torchrun_oom.err"); trun says: $(root_cause oom | grep -o 'cause     : .*' | cut -c1-60)..."
fi

# ---- 2. SIGKILL from elsewhere ----------------------------------------------------------------------------
mkdir -p "$tmp/d2"
run_case kill 1 in_memcg "$trun" "${trun_args[@]}" --events "$tmp/kill.events" "$worker" kill "$tmp/d2"
expect_root kill 'exitcode  : -9 \(pid' 'cause     : killed by SIGKILL \(signal 9\); no OOM kill recorded in its memory cgroup'
expect_event kill signal

# ---- 2b. a forged kernel record (a root worker writing to /dev/kmsg) ----------------------------------------
mkdir -p "$tmp/d2b"
run_case fakekmsg 1 in_memcg "$trun" "${trun_args[@]}" --events "$tmp/fakekmsg.events" "$worker" fakekmsg "$tmp/d2b"
{ timeout 2 cat /dev/kmsg || true; } | grep -a -q "Killed process [0-9]* (python3) .*(a forged record: trun test 42)" ||
  fail "fakekmsg: the worker's forged record is not in the kernel log (the case tests nothing)"
expect_root fakekmsg 'exitcode  : -9 \(pid' 'cause     : killed by SIGKILL \(signal 9\); no OOM kill recorded in its memory cgroup'
! grep -q "OOM killer" "$tmp/fakekmsg.err" || fail "fakekmsg: a forged /dev/kmsg record (user facility) was believed"
expect_event fakekmsg signal

# ---- the same inside a PID namespace ----------------------------------------------------------------------
if [ "$inner" = 1 ]; then
  echo "PASS (inside the PID namespace)"
  exit 0
fi
command -v unshare >/dev/null || fail "no unshare(1) (util-linux): cannot run the PID-namespace variant"
echo "== the OOM cases again under unshare --pid --fork --mount-proc"
inner_cg=$(dirname "$memcg")/trun-42-$$-ns
TRUN_T42_INNER=1 TRUN_T42_TAG=$$ unshare --pid --fork --mount-proc bash "$here/$(basename "$0")" 2>&1 |
  sed 's/^/  pidns| /' || fail "the PID-namespace variant failed (see pidns| above)"

# ---- 3. an import error -----------------------------------------------------------------------------------
mkdir -p "$tmp/d3"
run_case import 1 run_pg "$trun" "${trun_args[@]}" --events "$tmp/import.events" "$worker" import "$tmp/d3"
expect_root import 'exitcode  : 1 \(pid' "cause     : the script failed at start-up: ModuleNotFoundError: No module named 'nonexistent_module_for_trun_test'"
expect_event import startup_error

# ---- 3b. the last stderr lines: through the console stream, and from a --redirects log ----------------------
mkdir -p "$tmp/d3b"
cp "$repo/tests/fixtures/causes/cuda_oom_torch26.txt" "$tmp/d3b/say.txt"
run_case say_console 1 run_pg "$trun" "${trun_args[@]}" "$worker" say "$tmp/d3b"
expect_root say_console 'cause     : CUDA out of memory on its GPU: \[rank0\]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB'
cp "$repo/tests/fixtures/causes/nccl_torch113.txt" "$tmp/d3b/say.txt"
run_case say_redirected 1 run_pg "$trun" "${trun_args[@]}" --redirects 2 --log-dir "$tmp/d3b/logs" "$worker" say "$tmp/d3b"
expect_root say_redirected 'cause     : NCCL error: ncclUnhandledCudaError: Call to CUDA function failed.' 'log       : .*/stderr.log'

# ---- 4. a worker SIGKILL cannot end (frozen: state D) -------------------------------------------------------
fzmnt=$(awk '$9 == "cgroup" && $NF ~ /(^|,)freezer(,|$)/ {print $5; exit}' /proc/self/mountinfo)
fzpath=$(awk -F: '$2 ~ /(^|,)freezer(,|$)/ {print $3; exit}' /proc/self/cgroup)
[ -n "$fzmnt" ] || fail "no cgroup v1 freezer on this box: cannot make a worker that SIGKILL does not end"
freezer=$fzmnt${fzpath%/}/trun-42-fz-$$
mkdir "$freezer" || fail "cannot create the freezer cgroup $freezer"
mkdir -p "$tmp/d4"
(
  for _ in $(seq 600); do [ -s "$tmp/d4/pid.1" ] && break; sleep 0.1; done
  [ -s "$tmp/d4/pid.1" ] || exit 1
  echo "$(cat "$tmp/d4/pid.1")" >"$freezer/cgroup.procs" && echo FROZEN >"$freezer/freezer.state"
  for _ in $(seq 100); do [ "$(cat "$freezer/freezer.state")" = FROZEN ] && break; sleep 0.1; done
  touch "$tmp/d4/go"
) &
freezer_job=$!
run_case stuck 3 run_pg "$trun" "${trun_args[@]}" --events "$tmp/stuck.events" "$worker" stuck "$tmp/d4"
wait "$freezer_job" || fail "stuck: rank 1 never wrote its pid, or the freezer did not freeze it"
grep -Eq "rank 1 \(local 1, pid [0-9]+\) is still in state D \(uninterruptible sleep\)( in [a-z_]+)? 10 s after SIGKILL: SIGKILL cannot end it" "$tmp/stuck.err" ||
  fail "stuck: trun did not say that rank 1 is stuck in state D"
grep -q "is unhealthy: rank 1 (local 1, pid [0-9]*) on .*: SIGKILL did not end it" "$tmp/stuck.err" || fail "stuck: the unhealthy exit does not name the stuck rank"
grep -q '"event": *"worker_stuck"' "$tmp/stuck.events" || fail "stuck: no worker_stuck event"
grep -q "cause     : SIGKILL did not end it: still in state D" "$tmp/stuck.err" || fail "stuck: the report does not name rank 1 as stuck"
echo "PASS"

#!/usr/bin/env bash
# `trun-topo hang` by hand on a node, without being told where the job's NCCL RAS listens (no --ras-addr, no
# NCCL_RAS_ADDR): it finds the address the job's processes were given (agent/hang/ras_find.c), as an engineer
# who logs into the node expects. Real torch 1.13 gloo workers (tests/helpers/hang_worker.py: each writes the
# NCCL_RAS_ADDR it got and sleeps) and the NCCL RAS stand-in (tests/fakes/ras_server.py) on job A's address.
# All of it inside a PID namespace of its own (unshare --pid --fork --mount-proc: /proc shows only this test's
# processes, whatever else runs on the box; the kernel ends them all with the namespace):
#  - no job: NCCL's default address is asked, and said (exit 1: nothing listens);
#  - one job (A): its address is asked and said with its run id; the stand-in's communicator is printed;
#  - a second job (B, started warm: --warm-start, so its worker's environment is its pool process's): both
#    addresses listed, exit 2; --ras-addr or NCCL_RAS_ADDR still ask the one given, with no search;
#  - job A stopped: job B's address is found from its warm worker and pool process (nothing listens: exit 1).
# Only loopback traffic. Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
topo=$build/trun-topo
[ -x "$topo" ] || fail "$topo is missing; run 'make' first"
if [ "${TRUN_T103_INNER:-0}" != 1 ]; then
  command -v unshare >/dev/null || fail "no unshare(1) (util-linux): cannot make the test's PID namespace"
  rc=0
  TRUN_T103_INNER=1 unshare --pid --fork --mount-proc bash "$here/$(basename "$0")" 2>&1 | sed 's/^/  pidns| /' ||
    rc=$?
  [ $rc -eq 0 ] || fail "the test inside its PID namespace failed (see pidns| above)"
  echo PASS
  exit 0
fi
unset NCCL_RAS_ADDR
fake=$repo/tests/fakes/ras_server.py
worker=$repo/tests/helpers/hang_worker.py

# topo NAME ARGS...: trun-topo hang ARGS with stdout / stderr in $tmp/NAME.out / .err; its exit code in rc.
topo() {
  local name=$1
  shift
  rc=0
  timeout 60 "$topo" hang "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}

echo "== no job: NCCL's default address"
topo none --once
[ $rc -eq 1 ] || fail "no job: exit $rc, want 1 (nothing listens): $(cat "$tmp/none.err")"
grep -q "no process on this host that this user can read was given NCCL_RAS_ADDR; asking NCCL's default localhost:28028" \
  "$tmp/none.err" || fail "no job: it did not say that it asks NCCL's default: $(cat "$tmp/none.err")"
echo PASS

echo "== one job: its own address, found"
mkdir -p "$tmp/A" "$tmp/B"
PYTHON_EXEC=$host_py setsid "$trun" --standalone --nproc-per-node 2 --max-restarts 0 "$worker" "$tmp/A" \
  >"$tmp/A.out" 2>"$tmp/A.err" &
jobA=$!
_bg_pgids+=("$jobA")
for r in 0 1; do wait_file "$tmp/A/pid.$r" "job A's rank $r" "$jobA"; done
addrA=$(cat "$tmp/A/ras_addr.0")
[[ $addrA == 127.0.0.1:* ]] || fail "job A's workers got NCCL_RAS_ADDR='$addrA', want 127.0.0.1:<port>"
setsid "$host_py" "$fake" --mode job-idle --addr "$addrA" --port-file "$tmp/rasA.port" --pid-dir "$tmp/A" \
  --ranks 2 2>"$tmp/rasA.log" &
rasA=$!
_bg_pgids+=("$rasA")
for _ in $(seq 300); do [ -s "$tmp/rasA.port" ] && break; sleep 0.1; done
[ -s "$tmp/rasA.port" ] || fail "the RAS stand-in did not listen: $(cat "$tmp/rasA.log")"
topo one --once
[ $rc -eq 0 ] || fail "one job: exit $rc, want 0: $(cat "$tmp/one.err")"
grep -q "asking the NCCL RAS of the job on this host at $addrA (run id [0-9a-f-]*, 2 process(es), pid [0-9]* first" \
  "$tmp/one.err" || fail "one job: it did not say which job's address it asks ($addrA): $(cat "$tmp/one.err")"
grep -q "^communicator 0x[0-9a-f]*: 2 ranks, 2 answered" "$tmp/one.out" ||
  fail "one job: no communicator from the stand-in at $addrA: $(cat "$tmp/one.out" "$tmp/one.err")"
echo PASS

echo "== two jobs (the second warm): both listed, exit 2; an address given is asked as given"
PYTHON_EXEC=$host_py setsid "$trun" --warm-start --warm-start-modules json --standalone --nproc-per-node 1 \
  --max-restarts 0 "$worker" "$tmp/B" >"$tmp/B.out" 2>"$tmp/B.err" &
jobB=$!
_bg_pgids+=("$jobB")
wait_file "$tmp/B/pid.0" "job B's rank 0" "$jobB"
addrB=$(cat "$tmp/B/ras_addr.0")
[[ $addrB == 127.0.0.1:* ]] && [ "$addrB" != "$addrA" ] ||
  fail "job B's worker got NCCL_RAS_ADDR='$addrB', want 127.0.0.1:<port> other than job A's ($addrA)"
topo two --once
[ $rc -eq 2 ] || fail "two jobs: exit $rc, want 2: $(cat "$tmp/two.out" "$tmp/two.err")"
grep -q "2 jobs on this host have an NCCL RAS address of their own; pick one with --ras-addr" "$tmp/two.err" &&
  grep -q "^  $addrA  *run id [0-9a-f-]*, 2 process(es)" "$tmp/two.err" && grep -q "^  $addrB " "$tmp/two.err" ||
  fail "two jobs: not both listed ($addrA, $addrB): $(cat "$tmp/two.err")"
[ ! -s "$tmp/two.out" ] || fail "two jobs: it asked one of them anyway: $(cat "$tmp/two.out")"
topo given --once --ras-addr "$addrA"
[ $rc -eq 0 ] && grep -q "^communicator " "$tmp/given.out" ||
  fail "--ras-addr $addrA with two jobs: exit $rc: $(cat "$tmp/given.err")"
! grep -q "jobs on this host\|asking the NCCL RAS of the job" "$tmp/given.err" ||
  fail "--ras-addr: it searched anyway: $(cat "$tmp/given.err")"
rc=0
NCCL_RAS_ADDR=$addrA timeout 60 "$topo" hang --once >"$tmp/env.out" 2>"$tmp/env.err" || rc=$?
[ $rc -eq 0 ] && grep -q "^communicator " "$tmp/env.out" && [ ! -s "$tmp/env.err" ] ||
  fail "NCCL_RAS_ADDR=$addrA with two jobs: exit $rc: $(cat "$tmp/env.err")"
echo PASS

echo "== job A stopped: job B's address, from its warm worker and pool process"
stop_pid "$jobA"
kill -KILL -- "-$jobA" 2>/dev/null || true
for r in 0 1; do
  p=$(cat "$tmp/A/pid.$r")
  for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$p" 2>/dev/null || fail "job A's rank $r (pid $p) outlived its agent"
done
topo warm --once
[ $rc -eq 1 ] || fail "job B alone: exit $rc, want 1 (nothing listens at its address): $(cat "$tmp/warm.err")"
grep -q "asking the NCCL RAS of the job on this host at $addrB (" "$tmp/warm.err" ||
  fail "job B alone: it did not find job B's address $addrB: $(cat "$tmp/warm.err")"
stop_pid "$jobB"
stop_pid "$rasA"
echo PASS

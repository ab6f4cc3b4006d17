#!/usr/bin/env bash
# SIGTERM with a stuck rendezvous store (issue 28, "Why" 6): a 2-node static job on 127.0.0.1 (one gloo
# worker each) runs; node 0's agent, which serves the store, is frozen with SIGSTOP (the store accepts
# connections but answers nothing). Node 1 then gets SIGTERM: it must stop its worker and exit within its
# stop bounds (--shutdown-timeout 5 and the liveness window; a 60 s safety limit here, where the store's
# request time-outs held it about two minutes before), saying that the store did not answer, with the
# exit code of a signaled agent (1). Node 0 is resumed and stopped afterwards.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-83.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; done
  kill_marked
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(free_port)
mkdir -p "$tmp/out"
for n in 1 0; do
  "$TRUN" --nnodes 2 --node-rank $n --master-addr 127.0.0.1 --master-port "$port" --nproc-per-node 1 \
    --max-restarts 0 --monitor-interval 0.1 --shutdown-timeout 5 \
    "$TRUN_REPO/tests/helpers/acl_worker.py" "$tmp/out" >"$tmp/agent$n.out" 2>"$tmp/agent$n.err" &
  pids[$n]=$!
done
dump() { for n in 0 1; do echo "== agent $n stderr"; cat "$tmp/agent$n.err"; done; }
wait_for "[ -f '$tmp/out/ok.0' ] && [ -f '$tmp/out/ok.1' ]" 180 || { dump; fail "the job's workers did not all-reduce"; }
sleep 2 # a few heartbeats on the liveness connections, so that node 1's thread is in the round
note "freezing node 0's agent (pid ${pids[0]}, the store) and sending SIGTERM to node 1 (pid ${pids[1]})"
kill -STOP "${pids[0]}" || fail "cannot SIGSTOP node 0"
t0=$(now)
kill -TERM "${pids[1]}" || fail "cannot SIGTERM node 1"
if ! wait_pid_exit "${pids[1]}" 60; then
  dump
  fail "node 1 still runs $(elapsed "$t0") s after SIGTERM with a stuck store (want: within its stop bounds)"
fi
took=$(elapsed "$t0")
note "node 1 exited $WAIT_RC after ${took} s"
[ "$WAIT_RC" = 1 ] || { dump; fail "node 1 exited $WAIT_RC after SIGTERM, want 1"; }
grep -q "did not answer within" "$tmp/agent1.err" || { dump; fail "node 1 did not say that the store did not answer"; }
[ -z "$(count_marked acl_worker.py 2>/dev/null | grep -v '^0$')" ] || true
kill -CONT "${pids[0]}"
kill -TERM "${pids[0]}"
wait_pid_exit "${pids[0]}" 120 || fail "node 0 did not stop after SIGCONT + SIGTERM"
echo "PASS: node 1 stopped ${took} s after SIGTERM with its store frozen"

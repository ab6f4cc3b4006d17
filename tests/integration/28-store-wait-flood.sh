#!/usr/bin/env bash
# runner: alone
# A WAIT flood from strangers does not end a job (issue 41, finding 1). A 2-node --rdzv-backend trun job on
# 127.0.0.1 (real trun agents, one gloo worker each that all-reduces every 0.1 s) runs; meanwhile 24
# connections without the agent token send WAIT + CANCEL_WAIT again and again for 20 s (tests/store/
# wait_flood.py; a connection the store closes connects again): 12 WAIT on 131,072 fresh keys (over the
# connection's wait budget), 12 on 3,000 (within it: only the strangers' share of each loop turn holds them
# back). Before the fix every 131,072-key request cost the store ~60 ms of CPU and 27 MB under its key-space
# lock, and both agents were cut off ("no answer for 6.4 s", exit 4). Now:
#  1. the store closes the flooding connections for the wait budget with a line naming it;
#  2. both workers go on all-reducing after the flood (training did not stop);
#  3. told to stop, both workers exit 0 and so do both agents.
# The flood's length is a load, not a timed assertion.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-28.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

port=$(free_port)
mkdir -p "$tmp/out"
note "2-node trun-backend job on 127.0.0.1:$port, run id j28"
for n in 0 1; do
  "$TRUN" --nnodes 2 --rdzv-backend trun --rdzv-endpoint "127.0.0.1:$port" --rdzv-id j28 --local-addr 127.0.0.1 \
    --nproc-per-node 1 --max-restarts 0 --monitor-interval 0.1 --log-dir "$tmp/logs$n" \
    "$TRUN_REPO/tests/helpers/stop_worker.py" "$tmp/out" >"$tmp/agent$n.out" 2>"$tmp/agent$n.err" &
  pids[$n]=$!
done
dump() { for n in 0 1; do dump_agent "agent $n" "$tmp/agent$n.out" "$tmp/agent$n.err"; done; }
wait_for "[ -s '$tmp/out/step.0' ] && [ -s '$tmp/out/step.1' ]" 180 || { dump; fail "the job's workers did not all-reduce"; }

failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
note "flood: 24 tokenless connections, WAIT + CANCEL_WAIT for 20 s: 12 on 131072 fresh keys, 12 on 3000"
flood() { timeout --kill-after=5 120 "$TRUN_HOST_PY" "$TRUN_REPO/tests/store/wait_flood.py" flood 127.0.0.1 "$port" \
  --conns 12 --seconds 20 --keys "$1" || echo "FAIL: the flood's client failed" >"$tmp/flood$1.failed"; }
flood 131072 &
f1=$!
flood 3000
wait "$f1"
[ -e "$tmp/flood131072.failed" ] || [ -e "$tmp/flood3000.failed" ] && bad "a flood client failed"
for n in 0 1; do kill -0 "${pids[$n]}" 2>/dev/null || bad "agent $n ended during the flood"; done

# 1. The store named the budget it closed the flood for.
grep -q "over the connection's wait budget" "$tmp/agent0.err" "$tmp/agent1.err" ||
  bad "1: no agent logged closing a flooding connection for the wait budget"

# 2. Training goes on after the flood.
s0=$(cat "$tmp/out/step.0" 2>/dev/null || echo 0)
progress() { [ "$(cat "$tmp/out/step.0" 2>/dev/null || echo 0)" -gt $((s0 + 5)) ]; }
alive() { kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null; }
wait_for "progress || ! alive" 120; progress || bad "2: the workers made no progress after the flood"

# 3. The job ends well.
touch "$tmp/out/stop"
wait_agents 180 60 stop_worker.py "${pids[0]}" "${pids[1]}" || bad "3: the agents did not both exit"
for n in 0 1; do
  rc=${AGENT_RC[${pids[$n]}]:-?}
  [ "$rc" = 0 ] || bad "3: agent $n exited $rc, want 0 (a flood of strangers must not end the job)"
done
if [ "$failures" -gt 0 ]; then
  dump
  exit 1
fi
grep -h "cut off\|wait budget" "$tmp/agent0.err" "$tmp/agent1.err" | head -3
echo "PASS: a WAIT flood from 24 tokenless connections did not end the 2-node job"

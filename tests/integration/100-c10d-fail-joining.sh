#!/usr/bin/env bash
# A worker fails while a new node waits to join (c10d): the membership change, not a restart (torch's agent
# would spend one when its monitor sees the failure first). Two trun agents on 127.0.0.1, --nnodes 1:2,
# --max-restarts 0, one worker each (a shell script, --no-python): agent A starts alone (a round of one
# node); agent B comes and waits for the next round (--rdzv-status shows it waiting); then A's worker exits 1.
# The rendezvous tells A, through its one door, that nodes wait (trun_rdzv_failed_here: a MEMBER end), so A
# says the failure is the membership change, writes a membership_change event (waiting 1) and no failure
# event, and both nodes run the next round (attempt 0 still: TORCHELASTIC_RESTART_COUNT=0) whose workers
# succeed: both agents exit 0. A failure counted as a restart would end A with 1 (no restart left).
# Exit: 0 pass, 1 fail.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-100.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

# The worker: the first one to run (A's, round 0) says it runs, waits until the test says B waits (at most
# 60 s, a safety limit) and exits 1; every later one writes its restart count and exits 0.
cat >"$tmp/worker.sh" <<'SH'
#!/bin/sh
d=$(dirname "$0")
if mkdir "$d/first" 2>/dev/null; then
  touch "$d/running"
  i=0
  while [ ! -e "$d/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  exit 1
fi
echo "$TORCHELASTIC_RESTART_COUNT" >>"$d/counts"
exit 0
SH
chmod +x "$tmp/worker.sh"

port=$(free_port)
opts=(--nnodes 1:2 --nproc-per-node 1 --max-restarts 0 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port"
  --rdzv-id "fj$port" --rdzv-conf last_call_timeout=1 --no-python)
note "port $port: agent A alone"
"$TRUN" "${opts[@]}" --events "$tmp/evA.jsonl" "$tmp/worker.sh" >"$tmp/outA" 2>"$tmp/errA" &
AP=$!
pids+=("$AP")
wait_for '[ -e "$tmp/running" ]' 60 || { dump_agent A "$tmp/outA" "$tmp/errA"; fail "agent A's worker never ran"; }
note "agent B joins while A's worker runs"
"$TRUN" "${opts[@]}" --events "$tmp/evB.jsonl" "$tmp/worker.sh" >"$tmp/outB" 2>"$tmp/errB" &
BP=$!
pids+=("$BP")
waiting() {
  "$TRUN" --rdzv-status --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "fj$port" 2>/dev/null |
    grep -q '^waiting for the next round: 1$'
}
wait_for waiting 60 || { dump_agent B "$tmp/outB" "$tmp/errB"; fail "agent B never waited for the next round"; }
note "B waits: A's worker exits 1"
touch "$tmp/go"
wait_agents 60 30 worker.sh "$AP" "$BP" || fail "the agents did not both exit"
ok=1
bad() { echo "FAIL: $*"; ok=0; }
for n in A B; do
  p=$([ $n = A ] && echo "$AP" || echo "$BP")
  [ "${AGENT_RC[$p]:-}" = 0 ] || bad "agent $n exited ${AGENT_RC[$p]:-?}, want 0"
done
grep -q "a worker failed while 1 new node(s) wait to join the c10d rendezvous: taking it as the membership change (not counted as a restart)" "$tmp/errA" ||
  bad "agent A does not say the failure is the membership change"
grep -q '"event":"membership_change".*"waiting":1' "$tmp/evA.jsonl" || bad "agent A has no membership_change event (waiting 1)"
! grep -q '"event":"failure"' "$tmp/evA.jsonl" || bad "agent A wrote a failure event: the failure counted"
[ "$(sort "$tmp/counts" 2>/dev/null | tr '\n' ' ')" = "0 0 " ] ||
  bad "the next round's workers had restart counts '$(tr '\n' ' ' <"$tmp/counts" 2>/dev/null)', want 0 0"
if [ $ok = 0 ]; then
  for n in A B; do dump_agent "agent $n" "$tmp/out$n" "$tmp/err$n"; cat "$tmp/ev$n.jsonl" 2>/dev/null; done
  exit 1
fi
echo "PASS: a failure while a node waits to join is the membership change (c10d), not a restart"

#!/usr/bin/env bash
# After a worker's failure, the c10d round that follows ends its last call as soon as every node of the
# last round is back, as the round after a lost node does (docs/rendezvous.md, "The recovery round").
# Two trun agents on 127.0.0.1, --nnodes 1:3 (the round never fills to MAX), last_call_timeout=5,
# --max-restarts 1, one worker each (a shell script, --no-python): round 0 forms after its last call;
# then agent A's worker exits 1, both agents rejoin, and the round is complete as soon as both are back:
# an agent says so (debug log), and both exit 0 with restart count 1 in the new workers. Before the
# change a crash round waited out the last call, syncing the state once a second.
# Exit: 0 pass, 1 fail.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-101.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

# The worker: in round 0 each says it runs; A's (group rank 0) waits until both run and exits 1, B's waits
# to be stopped (at most 60 s, a safety limit). Every later worker writes its restart count and exits 0.
cat >"$tmp/worker.sh" <<'SH'
#!/bin/sh
d=$(dirname "$0")
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  touch "$d/run.$GROUP_RANK"
  i=0
  while [ $i -lt 600 ]; do
    if [ "$GROUP_RANK" = 0 ] && [ -e "$d/run.1" ]; then exit 1; fi
    sleep 0.1
    i=$((i + 1))
  done
  exit 0
fi
echo "$TORCHELASTIC_RESTART_COUNT" >>"$d/counts"
exit 0
SH
chmod +x "$tmp/worker.sh"

port=$(free_port)
opts=(--nnodes 1:3 --nproc-per-node 1 --max-restarts 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port"
  --rdzv-id "cr$port" --rdzv-conf last_call_timeout=5 --no-python)
note "port $port: two agents, --nnodes 1:3"
for n in A B; do
  TRUN_LOG_LEVEL=debug "$TRUN" "${opts[@]}" --events "$tmp/ev$n.jsonl" "$tmp/worker.sh" >"$tmp/out$n" 2>"$tmp/err$n" &
  pids+=("$!")
done
AP=${pids[0]} BP=${pids[1]}
wait_agents 90 30 worker.sh "$AP" "$BP" || fail "the agents did not both exit"
ok=1
bad() { echo "FAIL: $*"; ok=0; }
[ -e "$tmp/run.0" ] && [ -e "$tmp/run.1" ] || bad "round 0 did not hold both nodes (a slow start?)"
for n in A B; do
  p=$([ $n = A ] && echo "$AP" || echo "$BP")
  [ "${AGENT_RC[$p]:-}" = 0 ] || bad "agent $n exited ${AGENT_RC[$p]:-?}, want 0"
done
# One of the two ends the last call (the other may find the round complete already).
grep -h "round 1: every node of the last round is back: ending the last call now" "$tmp/errA" "$tmp/errB" | grep -q . ||
  bad "no agent ended round 1's last call when both nodes were back"
[ "$(sort "$tmp/counts" 2>/dev/null | tr '\n' ' ')" = "1 1 " ] ||
  bad "the next round's workers had restart counts '$(tr '\n' ' ' <"$tmp/counts" 2>/dev/null)', want 1 1"
if [ $ok = 0 ]; then
  for n in A B; do dump_agent "agent $n" "$tmp/out$n" "$tmp/err$n"; done
  exit 1
fi
echo "PASS: the c10d round after a worker's failure ends its last call once both nodes are back"

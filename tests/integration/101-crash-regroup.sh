#!/usr/bin/env bash
# After a worker's failure, the round that follows commits as soon as every node of the last round is back,
# as the round after a lost node does (docs/rendezvous.md, "The recovery round"), on both backends (c10d and
# trun). Two agents on 127.0.0.1, --nnodes 1:3 (the round never fills to MAX), last_call_timeout=5,
# --max-restarts 1, one worker each (a shell script, --no-python): round 0 forms after its last call; then
# agent A's worker exits 1, both agents rejoin, and the round is complete as soon as both are back: an agent
# says so (debug log), and both exit 0 with restart count 1 in the new workers. Before the change a crash
# round waited out the last call (and c10d synced the state once a second).
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

# run BACKEND LINE: the job on BACKEND; LINE is what one agent says as round 1 commits early.
run() {
  local be=$1 line=$2 d=$tmp/$1 port AP BP n p
  mkdir -p "$d"
  cp "$tmp/worker.sh" "$d/worker.sh"
  port=$(free_port)
  local opts=(--nnodes 1:3 --nproc-per-node 1 --max-restarts 1 --rdzv-backend "$be" --rdzv-endpoint "127.0.0.1:$port"
    --rdzv-id "cr$be$port" --rdzv-conf last_call_timeout=5 --no-python)
  note "$be, port $port: two agents, --nnodes 1:3"
  for n in A B; do
    TRUN_LOG_LEVEL=debug "$TRUN" "${opts[@]}" --events "$d/ev$n.jsonl" "$d/worker.sh" >"$d/out$n" 2>"$d/err$n" &
    pids+=("$!")
  done
  AP=${pids[-2]} BP=${pids[-1]}
  wait_agents 90 30 worker.sh "$AP" "$BP" || { bad "$be: the agents did not both exit"; return; }
  [ -e "$d/run.0" ] && [ -e "$d/run.1" ] || bad "$be: round 0 did not hold both nodes (a slow start?)"
  for n in A B; do
    p=$([ $n = A ] && echo "$AP" || echo "$BP")
    [ "${AGENT_RC[$p]:-}" = 0 ] || bad "$be: agent $n exited ${AGENT_RC[$p]:-?}, want 0"
  done
  # One of the two ends the last call (the other may find the round complete already).
  grep -h "round 1: $line" "$d/errA" "$d/errB" | grep -q . ||
    bad "$be: no agent committed round 1 early when both nodes were back"
  [ "$(sort "$d/counts" 2>/dev/null | tr '\n' ' ')" = "1 1 " ] ||
    bad "$be: the next round's workers had restart counts '$(tr '\n' ' ' <"$d/counts" 2>/dev/null)', want 1 1"
  if [ $ok = 0 ]; then
    for n in A B; do dump_agent "$be agent $n" "$d/out$n" "$d/err$n"; done
  fi
}

ok=1
bad() { echo "FAIL: $*"; ok=0; }
run c10d "every node of the last round is back: ending the last call now"
run trun "the 2 node(s) expected from the last round are back: committing without the last call"
[ $ok = 1 ] || exit 1
echo "PASS: the round after a worker's failure commits once both nodes are back (c10d and trun)"

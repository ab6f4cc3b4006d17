#!/usr/bin/env bash
# A node cut off while another agent shares its address (two agents of one box without --local-addr, as pods
# on the host's network are): the exclusion names the cut-off agent, not the address, so the survivor goes on.
# For the trun and c10d backends, two trun agents on this host (--nnodes 1:2, one gloo worker each:
# tests/helpers/loop_worker.py, --rdzv-endpoint 127.0.0.1, no --local-addr: both publish this host's FQDN):
#   1. A (the store's host) and B train in a world of 2; B's agent is frozen (SIGSTOP; its worker runs on).
#   2. A's liveness calls B silent and excludes it (cut_off): A must NOT take the record for its own (before
#      the fix it did: A exited 4 and the job died with the frozen node) and trains again in a world of 1.
#   3. `trun --rdzv-status` names the exclusion by its agent ("(agent pid <B>)"); `--list-excluded slurm`
#      lists no host (the host is not excluded, one agent is).
#   4. B is resumed (SIGCONT): it is cut off and exits 4, as before; A still trains.
#   5. A new agent C on the same host (another agent, not the cut-off one) joins: a world of 2 again. On c10d
#      this needs A, alone in a world of 1, to keep its c10d heartbeat and watch for nodes waiting (torch's
#      agent does at every monitor interval); before, A ran no tick there and C trained in a world of its
#      own beside A: two jobs under one run id. Both stop on SIGTERM, and the exit barrier counts each once.
# Assertions are on outcomes, not times (each wait is a safety limit).
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch
need_cmd ss iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-99.XXXXXX")
declare -A pid
cleanup() {
  for p in "${pid[@]}"; do kill -CONT "$p" 2>/dev/null; done
  kill_marked
  for p in "${pid[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT

listening() { ss -ltn "sport = :$1" 2>/dev/null | grep -q ":$1 "; }
# gone PID: the process ended (a zombie child counts)
gone() {
  local st
  st=$(awk '{sub(/.*\) /, ""); print $1}' "/proc/$1/stat" 2>/dev/null)
  [ -z "$st" ] || [ "$st" = Z ]
}

scenario() { # BACKEND
  local be=$1 out=$tmp/$1 port t0
  port=$(free_port)
  mkdir -p "$out"
  start() { # NAME
    LOOP_OUT=$out "$TRUN" --nnodes 1:2 --nproc-per-node 1 --rdzv-backend "$be" --rdzv-endpoint "127.0.0.1:$port" \
      --rdzv-id "cut-$be" --max-restarts 3 --monitor-interval 0.1 --log-dir "$out/logs$1" \
      "$TRUN_REPO/tests/helpers/loop_worker.py" >"$out/agent$1.out" 2>"$out/agent$1.err" &
    pid[$1]=$!
  }
  # trains NAME WORLD: a worker of agent NAME printed "ready" in a world of WORLD
  trains() { grep -q "LOOP rank [0-9]*/$2 attempt" "$out/agent$1.out" 2>/dev/null; }
  # a_rejoined: A trained in a world of 2 a second time (first with B, then with C)
  a_rejoined() { [ "$(grep -c "LOOP rank [0-9]*/2 attempt" "$out/agentA.out" 2>/dev/null)" -ge 2 ]; }
  dump() { for n in A B C; do [ -f "$out/agent$n.err" ] && dump_agent "$be agent $n" "$out/agent$n.out" "$out/agent$n.err"; done; }
  status() { "$TRUN" --rdzv-status --rdzv-backend "$be" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "cut-$be" --nnodes 1:2; }

  note "$be: agents A (the store's host) and B on this host, same address"
  start A
  wait_for "listening $port" 60 || { dump; fail "$be: A does not serve the rendezvous store on port $port"; }
  start B
  wait_for "trains A 2 && trains B 2" 120 || { dump; fail "$be: A and B did not train in a world of 2"; }

  note "$be: B's agent frozen (pid ${pid[B]})"
  kill -STOP "${pid[B]}" || fail "$be: cannot SIGSTOP agent B"
  t0=$(now)
  # A's fate: it trains in a world of 1, or (the bug) it exits, excluded for B's record.
  wait_for "trains A 1 || gone ${pid[A]}" 90 ||
    { dump; fail "$be: A neither trained again nor exited 90 s after B froze"; }
  if ! trains A 1; then
    wait_pid_exit "${pid[A]}" 30
    dump
    fail "$be: A, the survivor, exited $WAIT_RC after B froze instead of training on (excluded for B's cut-off?)"
  fi
  note "$be: A trains in a world of 1 after $(elapsed "$t0") s"
  grep -q "node .* (agent pid ${pid[B]}) is excluded from job 'cut-$be' for [0-9]* s: cut_off: cut off from the job: .*heartbeats missed" \
    "$out/agentA.err" || { dump; fail "$be: A did not say that it excluded agent B (pid ${pid[B]})"; }

  status >"$out/status.out" 2>&1 || { cat "$out/status.out"; fail "$be: --rdzv-status failed"; }
  grep -q '^excluded: 1$' "$out/status.out" &&
    grep -Eq "^  [^ ]+ \(agent pid ${pid[B]}\): cut off from the job: .*\(cut_off\), [0-9]+ s left$" "$out/status.out" ||
    { cat "$out/status.out"; fail "$be: --rdzv-status does not name the cut-off agent B (pid ${pid[B]})"; }
  local s
  s=$("$TRUN" --list-excluded slurm --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "cut-$be") ||
    fail "$be: --list-excluded slurm failed"
  [ -z "$s" ] || fail "$be: --list-excluded slurm printed '$s': the host is not excluded, one agent is"

  note "$be: B resumed"
  kill -CONT "${pid[B]}"
  wait_pid_exit "${pid[B]}" 60 || { dump; fail "$be: the cut-off agent B still runs 60 s after it was resumed"; }
  [ "$WAIT_RC" = 4 ] || { dump; fail "$be: the cut-off agent B exited $WAIT_RC, want 4"; }
  grep -q "cut off" "$out/agentB.err" || { dump; fail "$be: B does not say it was cut off"; }
  kill -0 "${pid[A]}" 2>/dev/null || { dump; fail "$be: A stopped when B came back"; }

  local left="A C" joined=", a new agent on its host joined"
  note "$be: a new agent C on the same host joins"
  start C
  wait_for "trains C 2 || trains C 1" 120 ||
    { dump; fail "$be: the new agent C (same host as the cut-off B) did not train"; }
  trains C 2 || { dump; fail "$be: the new agent C trained in a world of 1 beside A (two jobs, one run id): A did not see it waiting"; }
  wait_for a_rejoined 60 ||
    { dump; fail "$be: A did not restart into a world of 2 with C"; }
  for n in $left; do kill -TERM "${pid[$n]}" 2>/dev/null; done
  for n in $left; do wait_pid_exit "${pid[$n]}" 60 || { dump; fail "$be: agent $n did not stop on SIGTERM"; }; done
  # The exit barrier counts each node once (before, a node that left on SIGTERM counted itself by its loss
  # record and again as it left: "4 of 2 nodes left", and the store's host waited out the barrier).
  if grep -E "[3-9] of 2 nodes left|not every node left" "$out/agentA.err"; then
    dump
    fail "$be: the exit barrier miscounted the nodes that left"
  fi
  unset 'pid[A]' 'pid[B]' 'pid[C]'
  kill_marked
  echo "ok: $be: the survivor trained on, the cut-off agent exited 4$joined"
}

for be in ${CUTOFF_BACKENDS-trun c10d}; do scenario "$be"; done
echo PASS

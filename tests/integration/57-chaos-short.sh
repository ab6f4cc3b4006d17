#!/usr/bin/env bash
# Chaos, short version (make check; `make chaos` runs more rounds): 2 "hosts" = network namespaces
# (10.252.0.1-2, tests/agent/netns_lib.sh), one trun agent each (static backend), CHAOS_NPROC (default 1) workers
# per node running a
# gloo all-reduce loop (tests/agent/loop_worker.py). While every job runs, a store client sends one byte per
# second to node 0's store (tests/agent/slow_client.py). Round kinds:
#   worker-final    SIGKILL a random worker, no restarts: both agents exit 1, node 0's job-wide report names
#                   the killed rank and SIGKILL as the root cause, node 1 names why it stopped
#   worker-restart  SIGKILL a random worker, --max-restarts 1: the agents restart the workers together
#                   (every rank trains again), the agents' fd counts come back to their baseline, then SIGTERM
#   link            eth0 of a random node down for 2 s, then up: training goes on (every rank's step count
#                   grows), fd counts back to baseline, then SIGTERM
#   agent-kill      SIGKILL a random agent: the survivor exits 1 with a named cause (node 1: "lost the
#                   rendezvous store"; node 0: the failure report of its workers)
# After every round: no process of the job is left (TRUN_TEST_MARKER), every surviving agent's error line
# names its cause. CHAOS_ROUNDS (default 4: one of each kind) > 4 adds rounds of random kinds; CHAOS_SEED
# fixes the random choices (printed).
set -u
. "$(dirname "$0")/../agent/mn_lib.sh"
. "$TRUN_REPO/tests/agent/netns_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-57.XXXXXX")
A=()
slow=""
cleanup() {
  [ -n "$slow" ] && kill "$slow" 2>/dev/null && wait "$slow" 2>/dev/null
  kill_marked
  for p in "${A[@]}"; do wait "$p" 2>/dev/null; done
  netns_down
  rm -rf "$tmp"
}
trap cleanup EXIT

seed=${CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$seed
rounds=${CHAOS_ROUNDS:-4}
nproc=${CHAOS_NPROC:-1}
world=$((2 * nproc))
netns_up 10.252.0 2
export GLOO_SOCKET_IFNAME=eth0
note "marker $MARKER; seed $seed; $rounds rounds; namespaces ${NS_HOSTS[*]}"
port=29570

fdcount() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

# start_job DIR MAX_RESTARTS: agents 1 then 0, and the slow store client (outside the marker).
start_job() {
  local d=$1 n
  mkdir -p "$d/out"
  port=$((port + 1))
  for n in 1 0; do
    LOOP_OUT=$d/out ip netns exec "${NS_HOSTS[$n]}" "$TRUN" --nnodes 2 --node-rank $n --master-addr 10.252.0.1 \
      --master-port $port --nproc-per-node $nproc --max-restarts "$2" --log-dir "$d/logs$n" \
      "$TRUN_REPO/tests/agent/loop_worker.py" >"$d/a$n.out" 2>"$d/a$n.err" &
    A[$n]=$!
  done
  env -u TRUN_TEST_MARKER ip netns exec "${NS_HOSTS[1]}" "$TRUN_HOST_PY" "$TRUN_REPO/tests/agent/slow_client.py" \
    10.252.0.1 $port "$d/slow.log" &
  slow=$!
}

ready_count() { ls "$1/out" 2>/dev/null | grep -c "^ready\.$2\."; }

wait_ready() { # DIR ATTEMPT
  wait_for "[ \$(ready_count '$1' $2) = $world ]" 120 || {
    dump_job "$1"; show_marked; fail "round $r: the $world ranks did not train (attempt $2)"; }
}

dump_job() {
  dump_agent "agent 0" "$1/a0.out" "$1/a0.err"
  dump_agent "agent 1" "$1/a1.out" "$1/a1.err"
  echo "slow client: $(tr '\n' ';' <"$1/slow.log" 2>/dev/null)"
}

# Waits for the agents still in "$@" (node numbers) to exit; their codes in RC[n].
declare -A RC
wait_nodes() {
  local n pids=()
  for n in "$@"; do pids+=("${A[$n]}"); done
  wait_agents 120 60 loop_worker "${pids[@]}" || { dump_job "$d"; fail "round $r: agents did not exit"; }
  for n in "$@"; do RC[$n]=${AGENT_RC[${A[$n]}]}; done
}

end_round() { # DIR: slow client off, nothing of the job left
  kill "$slow" 2>/dev/null; wait "$slow" 2>/dev/null; slow=""
  grep -q connected "$1/slow.log" 2>/dev/null || fail "round $r: the slow store client never connected"
  if ! wait_for '[ -z "$(marked_pids)" ]' 20; then
    show_marked; dump_job "$1"; fail "round $r: processes of the job are left (orphans)"
  fi
  echo "round $r ($kind): ok, no process left"
}

# Every rank trains on: each rank's step count grows.
steps_grow() {
  local d=$1 k before=() now
  for ((k = 0; k < world; k++)); do before[$k]=$(awk '{print $2}' "$d/out/step.$k" 2>/dev/null || echo 0); done
  for ((k = 0; k < world; k++)); do
    wait_for "now=\$(awk '{print \$2}' '$d/out/step.$k' 2>/dev/null); [ \"\${now:-0}\" -gt $((${before[$k]:-0} + 5)) ]" 60 ||
      { dump_job "$d"; fail "round $r: rank $k stopped training"; }
  done
}

fd_back() { # DIR NODE BASELINE
  if ! wait_for "[ \$(fdcount ${A[$2]}) = $3 ]" 20; then
    ls -l "/proc/${A[$2]}/fd"; dump_job "$1"
    fail "round $r: agent $2 holds $(fdcount "${A[$2]}") fds, $3 before (leak)"
  fi
  echo "agent $2: $3 fds before, $(fdcount "${A[$2]}") after"
}

sigterm_end() { # DIR
  kill -TERM "${A[0]}" "${A[1]}"
  wait_nodes 0 1
  for n in 0 1; do
    [ "${RC[$n]}" = 1 ] || { dump_job "$1"; fail "round $r: agent $n exited ${RC[$n]} after SIGTERM, want 1"; }
    grep -q "SIGTERM: forwarding it to the workers" "$1/a$n.err" || { dump_job "$1"; fail "round $r: agent $n does not name SIGTERM"; }
  done
}

kinds=(worker-final worker-restart link agent-kill)
t0=$(now)
for ((r = 0; r < rounds; r++)); do
  if [ $r -lt 4 ]; then kind=${kinds[$r]}; else kind=${kinds[$((RANDOM % 4))]}; fi
  d=$tmp/r$r
  echo "=== round $r: $kind ($(elapsed "$t0") s)"
  case $kind in
  worker-final)
    start_job "$d" 0
    wait_ready "$d" 0
    v=$((RANDOM % world)); vpid=$(cat "$d/out/ready.0.$v")
    echo "SIGKILL rank $v (pid $vpid)"
    kill -KILL "$vpid"
    wait_nodes 0 1
    dump_job "$d"
    [ "${RC[0]}" = 1 ] && [ "${RC[1]}" = 1 ] || fail "round $r: agents exited ${RC[0]}/${RC[1]}, want 1/1"
    root=$(sed -n '/^Root Cause (first observed failure):/,/^=/p' "$d/a0.err")
    echo "$root" | grep -q "rank      : $v (local_rank: $((v % nproc)))" && echo "$root" | grep -q "Signal 9 (SIGKILL) received by PID $vpid" ||
      fail "round $r: node 0's report does not name rank $v's SIGKILL as the root cause"
    if [ $v -lt $nproc ]; then
      grep -q "node rank 1: workers stopped because another node failed" "$d/a1.err" || fail "round $r: node 1 names no cause"
    fi
    ;;
  worker-restart)
    start_job "$d" 1
    wait_ready "$d" 0
    wait_for "grep -q connected '$d/slow.log' 2>/dev/null" 30 || fail "round $r: the slow client did not connect"
    f0=$(fdcount "${A[0]}"); f1=$(fdcount "${A[1]}")
    v=$((RANDOM % world)); vpid=$(cat "$d/out/ready.0.$v")
    echo "SIGKILL rank $v (pid $vpid); agent fds $f0 / $f1"
    kill -KILL "$vpid"
    wait_ready "$d" 1
    grep -q "restarting the workers (attempt 1" "$d/a$((v / nproc)).err" || { dump_job "$d"; fail "round $r: node $((v / nproc)) names no restart"; }
    grep -q "node $((v / nproc)) failed: stopping this node's workers" "$d/a$((1 - v / nproc)).err" ||
      { dump_job "$d"; fail "round $r: node $((1 - v / nproc)) does not name node $((v / nproc))'s failure"; }
    fd_back "$d" 0 "$f0"; fd_back "$d" 1 "$f1"
    sigterm_end "$d"
    ;;
  link)
    start_job "$d" 0
    wait_ready "$d" 0
    wait_for "grep -q connected '$d/slow.log' 2>/dev/null" 30 || fail "round $r: the slow client did not connect"
    f0=$(fdcount "${A[0]}"); f1=$(fdcount "${A[1]}")
    v=$((RANDOM % 2))
    echo "eth0 of node $v down for 2 s; agent fds $f0 / $f1"
    ip -n "${NS_HOSTS[$v]}" link set eth0 down
    sleep 2
    ip -n "${NS_HOSTS[$v]}" link set eth0 up
    steps_grow "$d"
    fd_back "$d" 0 "$f0"; fd_back "$d" 1 "$f1"
    sigterm_end "$d"
    ;;
  agent-kill)
    start_job "$d" 0
    wait_ready "$d" 0
    v=$((RANDOM % 2)); s=$((1 - v))
    echo "SIGKILL agent $v (pid ${A[$v]})"
    kill -KILL "${A[$v]}"
    wait_nodes "$s"
    wait "${A[$v]}" 2>/dev/null
    dump_job "$d"
    [ "${RC[$s]}" = 1 ] || fail "round $r: surviving agent $s exited ${RC[$s]}, want 1"
    if [ $s = 1 ]; then
      grep -q "lost the rendezvous store" "$d/a1.err" || fail "round $r: agent 1 does not name the lost store"
    else
      grep -q "^Root Cause (first observed failure):" "$d/a0.err" || fail "round $r: agent 0 printed no failure report"
    fi
    ;;
  esac
  end_round "$d"
done
echo "PASS: $rounds chaos rounds (seed $seed) in $(elapsed "$t0") s: no orphans, no fd leaks, named causes, true root cause"

#!/usr/bin/env bash
# Chaos, short version (make check; `make chaos` runs more rounds): 4 "hosts" = network namespaces
# (10.252.0.1-4, tests/helpers/netns_lib.sh): nodes 0 and 1 run a trun agent each (static backend unless said),
# CHAOS_NPROC (default 1) workers per node running a gloo all-reduce loop (tests/helpers/loop_worker.py);
# host 2 is a third node or the source of idle connections; host 3 never answers (blackhole routes back to
# the others: a connect to it hangs, it is never refused). While every job runs, a store client sends one
# byte per second to node 0's store (tests/helpers/slow_client.py). Round kinds:
#   worker-final    SIGKILL a random worker, no restarts: both agents exit 1, node 0's job-wide report names
#                   the killed rank and SIGKILL as the root cause, node 1 names why it stopped
#   worker-restart  SIGKILL a random worker, --max-restarts 1: the agents restart the workers together
#                   (every rank trains again), then SIGTERM
#   link            eth0 of a random node down for 1 s, then up: training goes on (every rank's step count
#                   grows), then SIGTERM
#   agent-kill      SIGKILL a random agent while it trains: the survivor exits 1 with a named cause (node 1:
#                   "lost the rendezvous store"; node 0: the failure report, whose root cause is node 1, lost)
#   rdzv-agent      --nnodes 3 (static, c10d or trun backend, random): agents 0 and 1 wait in the rendezvous for node 2;
#                   SIGKILL a random one of them. Node 0 killed (the store host): agent 1 exits 1 naming
#                   the lost store. Node 1 killed: agent 0 waits on; a new agent 1 and node 2 join and every
#                   rank of the 3 nodes trains, then SIGTERM
#   rdzv-worker     SIGKILL a random worker of the first attempt as soon as it started, before the workers'
#                   process group formed, --max-restarts 1: the agents restart together and every rank
#                   trains (attempt 1), then SIGTERM
#   unreachable     an agent of a random backend (static, c10d, trun) whose master address / endpoint is the
#                   silent host 3, join_timeout=8: it exits 1 naming host 3's host:port and the time-out
#   idle-conns      10,000 idle connections to node 0's store (CHAOS_CONNS; from 4 addresses of host 2, under
#                   the 4096 per-address limit) while the job trains: training goes on, node 0's RSS is
#                   recorded (growth under 1 MiB per 100 connections), every connection is released
#                   (node 0's fd count back to its baseline), then SIGTERM. The agents run with a soft
#                   RLIMIT_NOFILE of CHAOS_CONNS + 1024 at least (raised here; fewer connections where the
#                   hard limit is lower)
# After every round: no process of the job is left (TRUN_TEST_MARKER); every agent that was still running
# holds as many fds as in training before the round's disruption (compared in every kind where an agent
# lives on: the kinds that kill or end every agent check that no socket of the job's ports is left open in
# any namespace instead, which an fd leaked to a child would keep); every agent that exited names its cause.
# CHAOS_ROUNDS (default 8: every kind once, about 35 s) rounds; the first 8 take the kinds in a rotation that
# starts at CHAOS_SEED mod 8 (so 4 rounds = 4 kinds, a different half each seed), later rounds pick kinds at
# random. CHAOS_SEED fixes the random choices (printed); CHAOS_KINDS="k1 k2" runs only those kinds, in turn.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/netns_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-57.XXXXXX")
A=()
slow=""
flood=""
cleanup() {
  [ -n "$slow" ] && kill "$slow" 2>/dev/null && wait "$slow" 2>/dev/null
  [ -n "$flood" ] && kill "$flood" 2>/dev/null && wait "$flood" 2>/dev/null
  kill_marked
  for p in "${A[@]}"; do wait "$p" 2>/dev/null; done
  netns_down
  rm -rf "$tmp"
}
trap cleanup EXIT

seed=${CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$seed
nproc=${CHAOS_NPROC:-1}
conns=${CHAOS_CONNS:-10000}
# The agents need an fd each per idle connection: the soft RLIMIT_NOFILE they inherit goes up to hold them
# and 1024 more (the agent keeps its own limit: with a soft limit of 1024, 991 idle connections use up every
# fd of node 0's agent). Where the hard limit is lower, fewer connections (said in the log).
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt $((conns + 1024)) ]; then conns=$((hard - 1024)); fi
[ "$(ulimit -Sn)" = unlimited ] || [ "$(ulimit -Sn)" -ge $((conns + 1024)) ] || ulimit -Sn $((conns + 1024)) ||
  fail "cannot raise the soft fd limit to $((conns + 1024)) (hard: $hard)"
net=10.252.0
netns_up $net 4
export GLOO_SOCKET_IFNAME=eth0
# Host 3 never answers: it drops every packet back to the others (its ARP still works, so a connect to it
# neither fails nor is refused: it waits for a SYN-ACK that never comes).
for n in 1 2 3; do ip -n "${NS_HOSTS[3]}" route add blackhole $net.$n/32 || fail "blackhole route on ${NS_HOSTS[3]}"; done
# Host 2's extra source addresses for the idle connections.
FLOOD_SRC=($net.3 $net.11 $net.12 $net.13)
for a in "${FLOOD_SRC[@]:1}"; do ip -n "${NS_HOSTS[2]}" addr add $a/24 dev eth0 || fail "addr $a on ${NS_HOSTS[2]}"; done
port=29570

fdcount() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }

# start_agent DIR NODE NAMESPACE MAX_RESTARTS [OPTION...]: one agent of the round's job (port $port, node
# rank NODE unless the options give a backend), pid in A[NODE].
start_agent() {
  local d=$1 n=$2 ns=$3 mr=$4; shift 4
  mkdir -p "$d/out"
  LOOP_OUT=$d/out ip netns exec "${NS_HOSTS[$ns]}" "$TRUN" --nproc-per-node $nproc --max-restarts "$mr" \
    --log-dir "$d/logs$n" --events "$d/ev$n.jsonl" "$@" \
    "$TRUN_REPO/tests/helpers/loop_worker.py" >>"$d/a$n.out" 2>>"$d/a$n.err" &
  A[$n]=$!
}
static_opts() { echo --nnodes "$1" --node-rank "$2" --master-addr $net.1 --master-port $port; }
# dyn_opts BACKEND NNODES NODE: c10d or trun backend; the node's address as its identity (the namespaces
# share one host name, which would be every node's MASTER_ADDR otherwise).
dyn_opts() {
  echo --nnodes "$2" --rdzv-backend "$1" --rdzv-endpoint $net.1:$port --rdzv-id chaos$port --local-addr $net.$(($3 + 1))
}

# start_job DIR MAX_RESTARTS: agents 1 then 0 (2 nodes, static), and the slow store client.
start_job() {
  port=$((port + 1))
  world=$((2 * nproc))
  start_agent "$1" 1 1 "$2" $(static_opts 2 1)
  start_agent "$1" 0 0 "$2" $(static_opts 2 0)
  start_slow "$1"
}
start_slow() { # outside the marker: it is not part of the job
  env -u TRUN_TEST_MARKER ip netns exec "${NS_HOSTS[1]}" "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/slow_client.py" \
    $net.1 $port "$1/slow.log" &
  slow=$!
}

ready_count() { ls "$1/out" 2>/dev/null | grep -c "^ready\.$2\."; }

wait_ready() { # DIR ATTEMPT
  wait_for "[ \$(ready_count '$1' $2) = $world ]" 120 || {
    dump_job "$1"; show_marked; fail "round $r: the $world ranks did not train (attempt $2)"; }
}

dump_job() {
  local f
  for f in "$1"/a*.err; do
    [ -e "$f" ] || continue
    f=${f%.err}; dump_agent "agent ${f##*/a}" "$f.out" "$f.err"
  done
  for f in "$1"/ev*.jsonl; do [ -e "$f" ] && echo "events ${f##*/}:" && cat "$f"; done
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

# Sockets of the round's store port ($port) in a namespace that a process still holds open (ss -p names
# the holder; a socket the kernel finishes alone, like FIN-WAIT-2 after its process closed it, holds no fd).
open_sockets() { # NAMESPACE
  ip netns exec "${NS_HOSTS[$1]}" ss -Htanp state all "( sport = :$port or dport = :$port )" 2>/dev/null |
    grep 'users:'
}

end_round() { # DIR: slow client off, nothing of the job left, no socket of its port left open
  local n
  kill "$slow" 2>/dev/null; wait "$slow" 2>/dev/null; slow=""
  if [ $need_slow = 1 ]; then
    grep -q connected "$1/slow.log" 2>/dev/null || fail "round $r: the slow store client never connected"
  fi
  if ! wait_for '[ -z "$(marked_pids)" ]' 20; then
    show_marked; dump_job "$1"; fail "round $r: processes of the job are left (orphans)"
  fi
  for n in 0 1 2 3; do
    if ! wait_for "[ -z \"\$(open_sockets $n)\" ]" 20; then
      open_sockets $n; dump_job "$1"; fail "round $r: sockets of port $port are left open in ${NS_HOSTS[$n]} (leaked fds)"
    fi
  done
  echo "round $r ($kind): ok, no process left, no socket of port $port open"
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

# fd_base DIR NODE...: the agents' fd counts in training (after the slow client connected), in F[NODE].
declare -A F
fd_base() {
  local d=$1 n; shift
  wait_for "grep -q connected '$d/slow.log' 2>/dev/null" 30 || fail "round $r: the slow client did not connect"
  for n in "$@"; do F[$n]=$(fdcount "${A[$n]}"); done
}

fd_back() { # DIR NODE...: each agent's fd count comes back to F[NODE]
  local d=$1 n; shift
  for n in "$@"; do
    if ! wait_for "[ \$(fdcount ${A[$n]}) = ${F[$n]} ]" 20; then
      ls -l "/proc/${A[$n]}/fd"; dump_job "$d"
      fail "round $r: agent $n holds $(fdcount "${A[$n]}") fds, ${F[$n]} before (leak)"
    fi
    echo "agent $n: ${F[$n]} fds before, $(fdcount "${A[$n]}") after"
  done
}

sigterm_end() { # DIR NODE...
  local d=$1 n pids=(); shift
  for n in "$@"; do pids+=("${A[$n]}"); done
  kill -TERM "${pids[@]}"
  wait_nodes "$@"
  for n in "$@"; do
    [ "${RC[$n]}" = 1 ] || { dump_job "$d"; fail "round $r: agent $n exited ${RC[$n]} after SIGTERM, want 1"; }
    grep -q "SIGTERM: forwarding it to the workers" "$d/a$n.err" || { dump_job "$d"; fail "round $r: agent $n does not name SIGTERM"; }
  done
}

in_rdzv() { grep -q '"event": *"rendezvous_start"' "$1" 2>/dev/null; } # EVENTS_FILE

kinds=(worker-final worker-restart link agent-kill rdzv-agent rdzv-worker unreachable idle-conns)
[ -n "${CHAOS_KINDS:-}" ] && read -r -a kinds <<<"$CHAOS_KINDS"
nk=${#kinds[@]}
rounds=${CHAOS_ROUNDS:-$nk}
declare -A DONE
note "marker $MARKER; seed $seed; $rounds rounds; namespaces ${NS_HOSTS[*]}; fd limit $(ulimit -Sn), $conns idle connections"
t0=$(now)
for ((r = 0; r < rounds; r++)); do
  if [ $r -lt $nk ]; then kind=${kinds[$(((seed + r) % nk))]}; else kind=${kinds[$((RANDOM % nk))]}; fi
  DONE[$kind]=$((${DONE[$kind]:-0} + 1))
  d=$tmp/r$r
  mkdir -p "$d"
  need_slow=1
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
    fd_base "$d" 0 1
    v=$((RANDOM % world)); vpid=$(cat "$d/out/ready.0.$v")
    echo "SIGKILL rank $v (pid $vpid); agent fds ${F[0]} / ${F[1]}"
    kill -KILL "$vpid"
    wait_ready "$d" 1
    grep -q "restarting the workers (attempt 1" "$d/a$((v / nproc)).err" || { dump_job "$d"; fail "round $r: node $((v / nproc)) names no restart"; }
    grep -q "node rank $((v / nproc)) failed: stopping this node's workers" "$d/a$((1 - v / nproc)).err" ||
      { dump_job "$d"; fail "round $r: node $((1 - v / nproc)) does not name node $((v / nproc))'s failure"; }
    fd_back "$d" 0 1
    sigterm_end "$d" 0 1
    ;;
  link)
    start_job "$d" 0
    wait_ready "$d" 0
    fd_base "$d" 0 1
    v=$((RANDOM % 2))
    # 1 s, not 2: TCP retransmits the heartbeat lost in the flap after 0.2, 0.6, 1.4 and 3.0 s, so a 2 s flap
    # can leave 4 s without one, the edge of the default liveness window (docs/rendezvous.md); it then failed
    # about one run in three, on every tree.
    echo "eth0 of node $v down for 1 s; agent fds ${F[0]} / ${F[1]}"
    ip -n "${NS_HOSTS[$v]}" link set eth0 down
    sleep 1
    ip -n "${NS_HOSTS[$v]}" link set eth0 up
    steps_grow "$d"
    fd_back "$d" 0 1
    sigterm_end "$d" 0 1
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
      # Node 0's report names the killed node lost, as the root cause: the store's host saw its connection
      # close (liveness), or (no record) it never saw the round end.
      sed -n '/^Root Cause (first observed failure):/,/^=/p' "$d/a0.err" |
        grep -E -q "traceback : node rank 1 \(ranks $nproc-$((2 * nproc - 1))\) on host .* \($net\.2\) was lost: (its connection to the rendezvous store closed|its trun agent did not see the round end)" ||
        fail "round $r: agent 0's report does not name the lost node rank 1 as the root cause"
    fi
    ;;
  rdzv-agent)
    port=$((port + 1))
    world=$((3 * nproc))
    bes=(static c10d trun); be=${bes[$((RANDOM % 3))]}
    # Dynamic backends: a 1 s heartbeat, so that the killed node is dropped after 3 s (not 15).
    opts() {
      if [ $be = static ]; then static_opts 3 "$1"
      else echo $(dyn_opts $be 3 "$1") --rdzv-conf keep_alive_interval=1,keep_alive_max_attempt=3; fi
    }
    start_agent "$d" 0 0 0 $(opts 0)
    start_slow "$d"
    wait_for "in_rdzv '$d/ev0.jsonl'" 30 || { dump_job "$d"; fail "round $r: agent 0 did not begin the rendezvous"; }
    start_agent "$d" 1 1 0 $(opts 1)
    # Agent 1 is in the rendezvous once its store connection is up and it began the round.
    wait_for "in_rdzv '$d/ev1.jsonl'" 30 || { dump_job "$d"; fail "round $r: agent 1 did not begin the rendezvous"; }
    # The slow client must be on node 0's store before the kill: a kill of agent 0 right away would end
    # the round before its Python started.
    wait_for "grep -q connected '$d/slow.log' 2>/dev/null" 30 || fail "round $r: the slow client did not connect"
    v=$((RANDOM % 2)); s=$((1 - v))
    # Both agents wait for node 2 (static: agent 0 for the last join, agent 1 for the go; c10d: for the third
    # participant); nothing else happens until it comes.
    echo "$be rendezvous, 2 of 3 nodes in: SIGKILL agent $v (pid ${A[$v]})"
    kill -KILL "${A[$v]}"
    wait "${A[$v]}" 2>/dev/null
    if [ $v = 0 ]; then
      wait_nodes 1
      dump_job "$d"
      [ "${RC[1]}" = 1 ] || fail "round $r: agent 1 exited ${RC[1]} after losing the store host in the rendezvous, want 1"
      grep -q -e "lost the rendezvous store" -e "rendezvous via $net.1:$port: .*Connection reset by peer" \
        -e "rendezvous store at $net.1:$port failed: Connection reset by peer" "$d/a1.err" ||
        fail "round $r: agent 1 does not name the lost rendezvous store"
    else
      mv "$d/a1.err" "$d/a1-killed.err"; mv "$d/a1.out" "$d/a1-killed.out"
      echo "agent 0 waits on; a new agent 1 and agent 2 join"
      # Dynamic backends: the replacements come after the killed node's heartbeat has expired (3 s), so that
      # it is dropped first. Had it joined the participants, and had two new nodes come at once, the round
      # would complete with the dead node in it, and rank 0 would wait for its role_info until the timeout,
      # as torch's agents do (torch >= 2.3 gathers role_info the same way).
      if [ $be != static ]; then sleep 4; fi
      start_agent "$d" 1 1 0 $(opts 1)
      start_agent "$d" 2 2 0 $(opts 2)
      wait_ready "$d" 0
      steps_grow "$d"
      sigterm_end "$d" 0 1 2
    fi
    ;;
  rdzv-worker)
    start_job "$d" 1
    v=$((RANDOM % world))
    # The victim's pid as soon as the agent spawned it (its worker_start event), before any rank is ready.
    wait_for "grep -q '\"rank\": *$v,.*\"attempt\": *0' '$d/ev$((v / nproc)).jsonl' 2>/dev/null" 60 ||
      { dump_job "$d"; fail "round $r: rank $v never started"; }
    vpid=$(grep "\"worker_start\"" "$d/ev$((v / nproc)).jsonl" | grep "\"rank\": *$v," | sed 's/.*"pid": *\([0-9]*\).*/\1/' | head -n1)
    echo "SIGKILL rank $v (pid $vpid) of attempt 0, $(ready_count "$d" 0) of $world ranks ready"
    kill -KILL "$vpid"
    wait_ready "$d" 1
    fd_base "$d" 0 1
    steps_grow "$d"
    fd_back "$d" 0 1
    sigterm_end "$d" 0 1
    ;;
  unreachable)
    port=$((port + 1))
    need_slow=0
    bes=(static c10d trun); be=${bes[$((RANDOM % 3))]}
    if [ $be = static ]; then o="--nnodes 2 --node-rank 1 --master-addr $net.4 --master-port $port"
    else o="--nnodes 2 --rdzv-backend $be --rdzv-endpoint $net.4:$port --rdzv-id chaos$port"; fi
    echo "$be agent on node 1, its store on the silent host $net.4:$port, join_timeout=8"
    ta=$(now)
    start_agent "$d" 1 1 0 $o --rdzv-conf join_timeout=8
    wait_nodes 1
    echo "agent 1 exited ${RC[1]} after $(elapsed "$ta") s"
    dump_job "$d"
    [ "${RC[1]}" = 1 ] || fail "round $r: agent 1 exited ${RC[1]}, want 1"
    grep -q "^trun: error: cannot reach the rendezvous store at $net.4:$port.*Connection timed out" "$d/a1.err" ||
      fail "round $r: agent 1 does not name the unreachable $net.4:$port and the time-out"
    ;;
  idle-conns)
    start_job "$d" 0
    wait_ready "$d" 0
    fd_base "$d" 0 1
    m0=$(rss_kib "${A[0]}")
    echo "$conns idle connections to node 0's store from ${FLOOD_SRC[*]}; agent 0: ${F[0]} fds, RSS $m0 KiB"
    env -u TRUN_TEST_MARKER ip netns exec "${NS_HOSTS[2]}" "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/idle_conns.py" \
      $net.1 $port "$conns" "$d/flood.log" "${FLOOD_SRC[@]}" &
    flood=$!
    wait_for "grep -q '^open' '$d/flood.log' 2>/dev/null || ! kill -0 $flood 2>/dev/null" 120 ||
      fail "round $r: the idle connections were not all opened"
    open=$(sed -n 's/^open //p' "$d/flood.log")
    f=$(fdcount "${A[0]}"); m1=$(rss_kib "${A[0]}")
    echo "flood: $(tr '\n' ';' <"$d/flood.log"); agent 0: $f fds, RSS $m1 KiB with them"
    [ "$open" = "$conns" ] || { dump_job "$d"; fail "round $r: $open of $conns idle connections held, want all"; }
    steps_grow "$d"
    [ $((m1 - m0)) -lt $((conns * 1024 / 100)) ] ||
      fail "round $r: agent 0's RSS grew by $((m1 - m0)) KiB for $conns idle connections (bound: 1 MiB per 100)"
    kill -TERM "$flood"; wait "$flood"; flood=""
    fd_back "$d" 0 1
    echo "agent 0: RSS $(rss_kib "${A[0]}") KiB after the connections closed"
    steps_grow "$d"
    sigterm_end "$d" 0 1
    ;;
  *) fail "unknown chaos kind '$kind' (CHAOS_KINDS)" ;;
  esac
  end_round "$d"
done
summary=""
for k in "${!DONE[@]}"; do summary+=" $k=${DONE[$k]}"; done
echo "PASS: $rounds chaos rounds (seed $seed) in $(elapsed "$t0") s, kinds:$summary: no orphans, no fd leaks, named causes, true root cause"

# Shared shell helpers for the multi-node / signal agent tests (tests/integration/50..54). Source it.
# Every process a test starts carries TRUN_TEST_MARKER=$MARKER in its environment, so cleanup can find
# (and the kill test can count) all of them, whatever process group or session they moved to.
TRUN_REPO=${TRUN_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TRUN_BUILD=${TRUN_BUILD:-$TRUN_REPO/build}
TRUN_HOST_PY=${TRUN_HOST_PY:-/usr/bin/python3}
TRUN=$TRUN_BUILD/trun
MARKER=${MARKER:-trun-test-$$-$(cat /proc/sys/kernel/random/uuid)}
export TRUN_TEST_MARKER=$MARKER
export PYTHON_EXEC=$TRUN_HOST_PY

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "$*" >&2; exit 77; }
note() { echo "--- $*"; }

# PIDs of every live process (not zombies) whose environment holds our marker, except this shell's.
marked_pids() { "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_procs.py" pids "$MARKER" $$; }

# Same, with state, ppid, pgid, sid and command line, for logs.
show_marked() { "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_procs.py" show "$MARKER" $$; }

# How many live marked processes have WORD in their argv.
count_marked() { "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_procs.py" count "$MARKER" "$1" $$; }

# SIGKILL every marked process (a few passes: new ones may appear while we kill).
kill_marked() {
  local i p
  for i in 1 2 3 4 5; do
    local ps; ps=$(marked_pids)
    [ -z "$ps" ] && return 0
    for p in $ps; do kill -KILL "$p" 2>/dev/null; done
    sleep 0.2
  done
}

# A TCP port nobody listens on: one that binds now (bound and released; good enough on loopback for a
# test), below the kernel's ephemeral range (ip_local_port_range), so that no outgoing connection of this
# box takes it between this call and the test's bind, and outside 29000-29999, where tests running beside
# this one use fixed ports.
free_port() {
  "$TRUN_HOST_PY" -c '
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(10000, max(lo, 10001))
    if 29000 <= p < 30000:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
'
}

# Seconds since the epoch, with fractions.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

# wait_pid_exit PID LIMIT_S: waits for a child of this shell to end; its exit code in $WAIT_RC;
# returns 1 (and leaves it running) if it outlived the safety limit.
wait_pid_exit() {
  local pid=$1 limit=$2 t0; t0=$(now)
  while kill -0 "$pid" 2>/dev/null; do
    if awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN{exit !(b-a>l)}'; then return 1; fi
    # reaped? (kill -0 succeeds on our own zombie children until wait)
    if [ "$(awk '{sub(/.*\) /, ""); print $1}' /proc/$pid/stat 2>/dev/null)" = "Z" ]; then break; fi
    sleep 0.1
  done
  wait "$pid"; WAIT_RC=$?
  return 0
}

# wait_for CONDITION_CMD LIMIT_S: polls a shell condition until true; returns 1 past the safety limit.
wait_for() {
  local cond=$1 limit=$2 t0; t0=$(now)
  until eval "$cond"; do
    if awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN{exit !(b-a>l)}'; then return 1; fi
    sleep 0.1
  done
  return 0
}

. "$TRUN_REPO/tests/helpers/need.sh"
# Check the torch 1.13 host interpreter once.
need_torch() { need_torch_py "$TRUN_HOST_PY"; }
[ -x "$TRUN" ] || { echo "FAIL: $TRUN is not built (run make)" >&2; exit 1; }

# wait_agents LIMIT_S IDLE_S WORD PID...: waits for every agent PID (children of this shell) to exit and
# stores each exit code in AGENT_RC[pid]. Safety limits, not timing assertions: returns 1 if an agent still
# runs after LIMIT_S, or if an agent has had no worker (a child whose argv holds WORD) for IDLE_S seconds
# while still running (it neither restarts nor exits: it hangs). Prints how long each agent took.
declare -A AGENT_RC
wait_agents() {
  local limit=$1 idle=$2 word=$3; shift 3
  local t0 left p st
  local -A idle_since=()
  t0=$(now)
  while :; do
    left=0
    for p in "$@"; do
      [ -n "${AGENT_RC[$p]:-}" ] && continue
      st=$(awk '{sub(/.*\) /, ""); print $1}' /proc/$p/stat 2>/dev/null)
      if [ -z "$st" ] || [ "$st" = Z ]; then
        wait "$p"; AGENT_RC[$p]=$?
        echo "agent pid $p exited ${AGENT_RC[$p]} after $(elapsed "$t0") s"
        continue
      fi
      left=$((left + 1))
      if ps -o args= --ppid "$p" 2>/dev/null | grep -qF -- "$word"; then
        idle_since[$p]=""
      elif [ -z "${idle_since[$p]:-}" ]; then
        idle_since[$p]=$(now)
      elif awk -v a="${idle_since[$p]}" -v b="$(now)" -v l="$idle" 'BEGIN{exit !(b-a>l)}'; then
        echo "HANG: agent pid $p still runs $(elapsed "${idle_since[$p]}") s after its last worker exited" \
          "($(elapsed "$t0") s after the wait began); the job's processes:"
        show_marked
        return 1
      fi
    done
    [ $left -eq 0 ] && return 0
    if awk -v a="$t0" -v b="$(now)" -v l="$limit" 'BEGIN{exit !(b-a>l)}'; then
      echo "TIMEOUT: $left agent(s) still run after $limit s:"; show_marked; return 1
    fi
    sleep 0.2
  done
}

# Prints an agent's captured output (for the log).
dump_agent() { # name out-file err-file
  echo "=== $1 stdout:"; cat "$2" 2>/dev/null; echo "=== $1 stderr:"; cat "$3" 2>/dev/null; echo "=== end of $1"
}

# Starts agents 2, 1, 0 (in that order, so that late store hosts are exercised) with the caller's
# start_agent, waits for them, and checks exit codes and the rank placement (3 nodes x 2 workers, master
# address $1). Fails the test on any difference.
run_three_agents_shuffled() { # master-addr
  local ok=1 ranks_ok n
  start_agent 2
  sleep 0.3 # only makes the shuffled start order likely (an agent starts in milliseconds); nothing depends on it
  start_agent 1
  sleep 0.3
  start_agent 0
  wait_agents 400 60 "python3 -u" "${pids[@]}" || ok=0
  for n in 0 1 2; do dump_agent "agent $n" "$tmp/agent$n.out" "$tmp/agent$n.err"; done
  "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_check_ranks.py" "$tmp" 3 2 "$1"
  ranks_ok=$?
  [ $ok = 1 ] || fail "the agents did not all exit (see above; workers all gone => the agent hangs)"
  for n in 0 1 2; do
    [ "${AGENT_RC[${pids[$n]}]}" = 0 ] || fail "agent $n exited ${AGENT_RC[${pids[$n]}]}, want 0"
  done
  [ $ranks_ok = 0 ] || fail "rank checks failed"
}

# del_netns_hosts BRIDGE_NS HOST_NS...: kills what still runs in the host namespaces, then deletes them and the
# bridge's (for a test's EXIT trap; missing ones are fine).
del_netns_hosts() {
  local ns
  for ns in "${@:2}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null; done
  for ns in "${@:2}" "$1"; do ip netns del "$ns" 2>/dev/null; done
  return 0
}

# make_netns_hosts PREFIX N BRIDGE_NS HOST_NS...: N namespaces PREFIX.1..N/24 on eth0, each joined by a veth
# pair to a bridge living in BRIDGE_NS (nothing touches the root namespace's interfaces). Skips (77) where
# namespaces, bridges or veth pairs cannot be made. The caller deletes the namespaces.
make_netns_hosts() {
  local prefix=$1 n=$2 br=$3 i h; shift 3
  local err; err=$(mktemp)
  ip netns add "$br" 2>"$err" || { rm -f "$err"; skip "cannot create a network namespace"; }
  rm -f "$err"
  ip -n "$br" link set lo up || fail "lo up in $br"
  ip -n "$br" link add br0 type bridge || skip "cannot create a bridge in a network namespace"
  ip -n "$br" link set br0 up || fail "br0 up"
  for ((i = 0; i < n; i++)); do
    h=$1; shift
    ip netns add "$h" || fail "netns add $h"
    ip -n "$h" link set lo up || fail "lo up in $h"
    ip -n "$h" link add eth0 type veth peer name vb$i netns "$br" || skip "cannot create veth pairs between namespaces"
    ip -n "$h" addr add "$prefix.$((i + 1))/24" dev eth0 || fail "addr on $h"
    ip -n "$h" link set eth0 up || fail "eth0 up in $h"
    ip -n "$br" link set vb$i master br0 || fail "vb$i to br0"
    ip -n "$br" link set vb$i up || fail "vb$i up"
  done
}

# Around a run in tests/helpers/sandbox_lib.sh's sandbox (tests 56, 59): sandbox_snapshot before it;
# sandbox_left NAME... after it fails the test if a process of the test (the marker), a network namespace of
# the machine named like one of the sandbox's hosts (NAME...), or a change to /etc/hosts or /etc/passwd
# outlived it.
sandbox_snapshot() { SB_ETC=$(cat /etc/hosts /etc/passwd | md5sum); }
sandbox_left() {
  local left n
  left=$(marked_pids)
  [ -z "$left" ] || { show_marked; fail "processes of the test outlived the sandbox: $left"; }
  [ "$(cat /etc/hosts /etc/passwd | md5sum)" = "$SB_ETC" ] || fail "/etc/hosts or /etc/passwd changed"
  for n in br "$@"; do
    ! ip netns list 2>/dev/null | grep -q "^$n\( \|$\)" || fail "network namespace $n is left in the machine's /run/netns"
  done
}

#!/usr/bin/env bash
# Signals to the agent (single node, 2 workers of tests/helpers/sig_worker.py; handlers write files):
#  1. SIGTERM: every worker records SIGTERM and exits; agent exit code 1.
#  2. --shutdown-timeout 2, local rank 1 ignores SIGTERM: after SIGTERM it keeps running (ticks after its
#     SIGTERM record), then is SIGKILLed (agent's debug log: "killed by SIGKILL"), records nothing after, and
#     the agent exits 1.
#  3. Second SIGTERM (both workers ignore SIGTERM, --shutdown-timeout 600): once both recorded the first
#     SIGTERM, a second one kills them at once (they are gone long before the shutdown timeout; the time is
#     printed); agent exit 1.
#  4. --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1: SIGUSR1 to the agent reaches every worker
#     (usr1.<lr> files) and the workers and the agent keep running (more ticks); then SIGTERM stops them.
#  5. The agent as PID 1 of a new PID namespace (unshare --pid --fork --mount-proc): worker 0 leaves
#     un-waited children (sh -c 'sleep 0.2 &': zombie sh, orphaned sleep; and `true`) and exits 0; while the
#     agent still runs (worker 1 alive) no zombie may remain in the namespace (polled, time printed, limit
#     10 s); then SIGTERM to the agent: worker 1 records it, the agent (and unshare) exit 1.
#  6. Multi-node (static, 2 agents on 127.0.0.1, 1 worker each): SIGTERM to node 1's agent: its worker records
#     SIGTERM and the agent exits 1 (safety limit 60 s with --shutdown-timeout 5). Node 0 is not checked.
#  7. --watch-stdin (stdin a FIFO this test writes, as trun --hostfile's pipe): (a) the hello line, then
#     "SIGTERM": the workers record SIGTERM, the agent exits 1; (b) the hello, then the end of stdin: the
#     workers record SIGHUP, the agent exits 1; (c) the end of stdin before any hello: the agent warns that it
#     is not tied to stdin and the workers keep running (SIGTERM ends them); (d) stdin /dev/null: the same.
# Time-outs are safety limits only; measured times are printed.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-54.XXXXXX")
agent=""
cleanup() { kill_marked; [ -n "$agent" ] && wait "$agent" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
note "marker $MARKER"

# start_job NAME MODES [trun options...]: starts the agent (pid in $agent), waits for both workers' ready files.
start_job() {
  local name=$1 modes=$2; shift 2
  D=$tmp/$name
  mkdir -p "$D/out"
  note "scenario $name: modes $modes, options: $*"
  SIG_OUT=$D/out TRUN_LOG_LEVEL=debug "$TRUN" --nproc-per-node 2 --log-dir "$D/logs" "$@" \
    "$TRUN_REPO/tests/helpers/sig_worker.py" "$modes" >"$D/agent.out" 2>"$D/agent.err" &
  agent=$!
  if ! wait_for '[ -f "$D/out/ready.0" ] && [ -f "$D/out/ready.1" ]' 60; then
    dump_agent "$name agent" "$D/agent.out" "$D/agent.err"; show_marked
    fail "$name: the workers did not start within 60 s"
  fi
}
# finish_job WANT_RC: waits for the agent (safety limit 120 s) and checks its exit code.
finish_job() {
  local t0; t0=$(now)
  if wait_pid_exit "$agent" 120; then
    echo "$(basename "$D"): agent exited $WAIT_RC $(elapsed "$t0") s after the wait began"
    [ "$WAIT_RC" = "$1" ] || bad "$(basename "$D"): agent exit code $WAIT_RC, want $1"
  else
    show_marked; bad "$(basename "$D"): the agent still runs after 120 s"
  fi
  agent=""
  dump_agent "$(basename "$D") agent" "$D/agent.out" "$D/agent.err"
  kill_marked
}
lines() { [ -f "$1" ] && grep -c . "$1" || echo 0; }
workers_alive() { count_marked "python3 -u"; }

# ---- 1. SIGTERM: handlers run, workers exit, agent exits 1 ----
start_job term term,term
kill -TERM "$agent"
finish_job 1
for lr in 0 1; do
  if [ -f "$D/out/term.$lr" ]; then echo "worker $lr recorded: $(cat "$D/out/term.$lr")"
    grep -q '^15 ' "$D/out/term.$lr" || bad "term: worker $lr recorded a signal other than SIGTERM"
  else bad "term: worker $lr did not record SIGTERM"; fi
done

# ---- 2. a worker ignoring SIGTERM is SIGKILLed after --shutdown-timeout 2 ----
start_job grace term,ignore --shutdown-timeout 2
t0=$(now)
kill -TERM "$agent"
finish_job 1
echo "grace: the agent was gone $(elapsed "$t0") s after SIGTERM (shutdown timeout 2 s)"
[ -f "$D/out/term.0" ] || bad "grace: worker 0 did not record SIGTERM"
if [ -f "$D/out/term.1" ]; then
  term_t=$(awk '{print $2; exit}' "$D/out/term.1")
  last_t=$(tail -n1 "$D/out/tick.1")
  echo "grace: worker 1 recorded SIGTERM at $term_t, its last tick at $last_t"
  awk -v a="$term_t" -v b="$last_t" 'BEGIN{exit !(b>a)}' || bad "grace: worker 1 never ran on after SIGTERM (it should ignore it)"
  [ "$(workers_alive)" = 0 ] || bad "grace: a worker outlived the agent"
  n1=$(lines "$D/out/tick.1"); sleep 0.5; n2=$(lines "$D/out/tick.1")
  [ "$n1" = "$n2" ] || bad "grace: worker 1 still records ticks after the agent exited ($n1 -> $n2)"
else
  bad "grace: worker 1 did not record SIGTERM"
fi
grep -q 'local 1, .*killed by SIGKILL' "$D/agent.err" || bad "grace: the agent's log does not say local rank 1 was killed by SIGKILL"
grep -q 'still runs .* after the stop signal: sending SIGKILL' "$D/agent.err" || bad "grace: no 'sending SIGKILL' warning"

# ---- 3. a second SIGTERM kills at once ----
start_job twice ignore,ignore --shutdown-timeout 600
kill -TERM "$agent"
wait_for '[ -f "$D/out/term.0" ] && [ -f "$D/out/term.1" ]' 60 || bad "twice: the workers did not record the first SIGTERM"
[ "$(workers_alive)" = 2 ] || bad "twice: workers ignoring SIGTERM did not survive the first SIGTERM"
t0=$(now)
kill -TERM "$agent"
if wait_for '[ "$(workers_alive)" = 0 ]' 60; then
  echo "twice: both workers gone $(elapsed "$t0") s after the second SIGTERM (shutdown timeout 600 s)"
else
  bad "twice: workers still run 60 s after the second SIGTERM"
fi
finish_job 1

# ---- 4. SIGUSR1 is forwarded when listed, the workers keep running ----
start_job usr1 usr1,usr1 --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1
kill -USR1 "$agent"
if wait_for '[ -f "$D/out/usr1.0" ] && [ -f "$D/out/usr1.1" ]' 30; then
  echo "usr1: both workers recorded SIGUSR1: $(cat "$D/out/usr1.0") / $(cat "$D/out/usr1.1")"
  for lr in 0 1; do
    n=$(lines "$D/out/tick.$lr")
    wait_for "[ \$(lines \"$D/out/tick.$lr\") -ge $((n + 3)) ]" 30 || bad "usr1: worker $lr stopped ticking after SIGUSR1"
  done
  [ "$(workers_alive)" = 2 ] || bad "usr1: $(workers_alive) worker(s) alive after SIGUSR1, want 2"
  kill -0 "$agent" 2>/dev/null || bad "usr1: the agent died of SIGUSR1"
else
  bad "usr1: SIGUSR1 did not reach both workers"
fi
kill -TERM "$agent"
finish_job 1
for lr in 0 1; do [ -f "$D/out/term.$lr" ] || bad "usr1: worker $lr did not record the final SIGTERM"; done

# ---- 5. agent as PID 1 of a PID namespace: SIGTERM, zombie reaping ----
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  D=$tmp/pidns
  mkdir -p "$D/out"
  note "scenario pidns: unshare --pid --fork --mount-proc trun, modes zombie,term"
  SIG_OUT=$D/out TRUN_LOG_LEVEL=debug unshare --pid --fork --mount-proc "$TRUN" --nproc-per-node 2 \
    --log-dir "$D/logs" "$TRUN_REPO/tests/helpers/sig_worker.py" zombie,term >"$D/agent.out" 2>"$D/agent.err" &
  agent=$!
  wait_for '[ -n "$(ps -o pid= --ppid '"$agent"')" ]' 30 || fail "pidns: unshare started nothing"
  inner=$(ps -o pid= --ppid "$agent" | head -n1 | tr -d ' ')
  echo "pidns: unshare pid $agent, agent host pid $inner, $(grep NSpid /proc/$inner/status)"
  [ "$(awk '/^NSpid/{print $NF}' /proc/$inner/status)" = 1 ] || bad "pidns: the agent is not PID 1 of its namespace"
  wait_for '[ -f "$D/out/ready.0" ] && [ -f "$D/out/ready.1" ]' 60 || bad "pidns: the workers did not start"
  echo "pidns: worker 0 left un-waited children: $(cat "$D/out/ready.0")"
  zombies() { "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_procs.py" subtree "$inner" | awk '$3=="Z" || $4=="sleep"'; }
  # Informational: the zombies exist while worker 0 lives (it never waits for them).
  if wait_for '[ -n "$(zombies)" ]' 5; then echo "pidns: seen while worker 0 runs (zombies, orphaned sleeps):"; zombies | sed 's/^/  /'
  else echo "pidns: (worker 0's zombies were not caught while it ran)"; fi
  # worker 0 exits after 1 s; worker 1 runs until SIGTERM
  wait_for '[ "$(workers_alive)" = 1 ]' 60 || bad "pidns: worker 0 did not exit"
  t0=$(now)
  echo "pidns: processes in the namespace after worker 0 exited:"
  "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_procs.py" subtree "$inner" | sed 's/^/  /'
  if wait_for '[ -z "$(zombies)" ]' 10; then
    echo "pidns: no zombie (nor orphaned sleep) left in the namespace $(elapsed "$t0") s after worker 0 exited"
  else
    echo "pidns: still there after 10 s:"; "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/mn_procs.py" subtree "$inner"
    bad "pidns: zombies remain in the agent's PID namespace"
  fi
  kill -0 "$inner" 2>/dev/null && [ "$(workers_alive)" = 1 ] || bad "pidns: the agent or worker 1 is not running any more"
  kill -TERM "$inner"
  finish_job 1
  [ -f "$D/out/term.1" ] && echo "pidns: worker 1 recorded $(cat "$D/out/term.1")" || bad "pidns: worker 1 did not record SIGTERM"
else
  bad "pidns: unshare --pid --fork --mount-proc does not work here (root is required)"
fi

# ---- 6. SIGTERM to one agent of a 2-node static job ----
D=$tmp/multinode
mkdir -p "$D/out"
port=$(free_port)
note "scenario multinode: 2 agents x 1 worker (term), port $port, SIGTERM to node 1's agent"
mpids=()
for n in 0 1; do
  SIG_OUT=$D/out/n$n TRUN_LOG_LEVEL=debug "$TRUN" --nnodes 2 --node-rank $n --master-addr 127.0.0.1 \
    --master-port "$port" --nproc-per-node 1 --shutdown-timeout 5 --log-dir "$D/logs$n" \
    "$TRUN_REPO/tests/helpers/sig_worker.py" term >"$D/agent$n.out" 2>"$D/agent$n.err" &
  mpids[$n]=$!
  mkdir -p "$D/out/n$n"
done
if wait_for '[ -f "$D/out/n0/ready.0" ] && [ -f "$D/out/n1/ready.0" ]' 60; then
  t0=$(now)
  kill -TERM "${mpids[1]}"
  if wait_pid_exit "${mpids[1]}" 60; then
    echo "multinode: node 1's agent exited $WAIT_RC $(elapsed "$t0") s after SIGTERM"
    [ "$WAIT_RC" = 1 ] || bad "multinode: node 1's agent exit code $WAIT_RC, want 1"
  else
    echo "multinode: node 1's agent still runs 60 s after SIGTERM; its threads:"
    gdb -p "${mpids[1]}" -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^#[0-9]+ .* (in|at) ' | head -20
    bad "multinode: node 1's agent did not exit within 60 s of SIGTERM (shutdown timeout 5 s)"
  fi
  [ -f "$D/out/n1/term.0" ] || bad "multinode: node 1's worker did not record SIGTERM"
else
  bad "multinode: the workers did not start"
fi
for n in 0 1; do dump_agent "multinode agent $n" "$D/agent$n.out" "$D/agent$n.err"; done
kill_marked
for p in "${mpids[@]}"; do wait "$p" 2>/dev/null; done

# ---- 7. --watch-stdin ----
# watch_job NAME STDIN: like start_job (modes term,term), with --watch-stdin and STDIN as the agent's stdin
# ("fifo": $D/in, which this shell opens as fd 7 once the agent is started).
watch_job() {
  D=$tmp/$1
  mkdir -p "$D/out"
  note "scenario $1: --watch-stdin, stdin $2"
  local in=/dev/null
  if [ "$2" = fifo ]; then mkfifo "$D/in"; in=$D/in; fi
  SIG_OUT=$D/out TRUN_LOG_LEVEL=debug "$TRUN" --nproc-per-node 2 --log-dir "$D/logs" --watch-stdin \
    "$TRUN_REPO/tests/helpers/sig_worker.py" term,term <"$in" >"$D/agent.out" 2>"$D/agent.err" &
  agent=$!
  if [ "$2" = fifo ]; then exec 7>"$D/in"; fi
}
watch_ready() {
  wait_for '[ -f "$D/out/ready.0" ] && [ -f "$D/out/ready.1" ]' 60 ||
    { dump_agent "$(basename "$D") agent" "$D/agent.out" "$D/agent.err"; fail "$(basename "$D"): no workers"; }
}
recorded() { # SIGNUM: both workers recorded it
  local lr
  for lr in 0 1; do
    grep -q "^$1 " "$D/out/term.$lr" 2>/dev/null || bad "$(basename "$D"): worker $lr recorded no signal $1"
  done
}
hello="trun-watch-stdin 1"
watch_job watch-term fifo
echo "$hello" >&7
watch_ready
echo SIGTERM >&7
finish_job 1
exec 7>&-
recorded 15
grep -q "trun: info: --watch-stdin: the launcher sent SIGTERM" "$D/agent.err" || bad "watch-term: no 'sent SIGTERM' line"

watch_job watch-eof fifo
echo "$hello" >&7
watch_ready
exec 7>&-
finish_job 1
recorded 1
grep -q "stdin ended: the launcher or its ssh session is gone; stopping as on SIGHUP" "$D/agent.err" ||
  bad "watch-eof: the agent does not say why it stopped"

for how in fifo devnull; do
  watch_job "watch-nohello-$how" $how
  [ $how = fifo ] && exec 7>&-
  watch_ready
  wait_for "grep -q -e 'stdin ended before the launcher' -e 'cannot watch stdin' '$D/agent.err'" 30 ||
    bad "watch-nohello-$how: no warning that the agent is not tied to stdin"
  n0=$(lines "$D/out/tick.0")
  sleep 1
  [ "$(lines "$D/out/tick.0")" -gt "$n0" ] || bad "watch-nohello-$how: the workers stopped"
  kill -TERM "$agent"
  finish_job 1
  recorded 15
done

[ $failures = 0 ] || fail "$failures check(s) failed"
echo "PASS: SIGTERM forwarding, SIGKILL after the shutdown timeout, second SIGTERM, SIGUSR1 forwarding, PID 1 reaping, multi-node SIGTERM, --watch-stdin"

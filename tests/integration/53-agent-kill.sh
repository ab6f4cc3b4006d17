#!/usr/bin/env bash
# SIGKILL to the agent while 2 workers run. Each worker has started a child (`sleep 1000`, in the worker's
# process group) and, through a child python, a grandchild `sleep 1000` that moved to its own process group
# (os.setpgid(0, 0)). Once the agent is gone nothing of the job may remain: every process is found by the
# marker TRUN_TEST_MARKER=<uuid> in its environment (/proc/*/environ), so moving to another process group
# hides nothing. Polls until none remains and prints the measured time; fails if any remains after 10 s.
# The agent runs torch's file-timer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1): its FIFO
# (<TMPDIR>/watchdog_timer_<uuid>) is there before the kill and must be gone after it (the guard removes it).
# Then processes that leave their worker's session (tests/helpers/stray_worker.py: a child in a session of its
# own and a double-forked daemon, per worker) and the agent's inherited descriptors:
#  2. SIGKILL to the agent once it has said it found them (debug): none of them outlives it (safety limit 10 s).
#  3. SIGTERM to the agent: none of them is left when the agent has exited (no wait after), exit 1.
#  4. Worker failure + restart (--max-restarts 1): attempt 1's workers find none of attempt 0's left.
#  5. fds 9, 10 and 251 open in the shell that starts trun: a worker's /proc/self/fd holds 0-2 only (and the
#     listing's own descriptor), with and without --warm-start.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-53.XXXXXX")
agent=""
cleanup() { kill_marked; [ -n "$agent" ] && wait "$agent" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/out"
note "marker $MARKER"

mkdir -p "$tmp/tmpdir"
TMPDIR=$tmp/tmpdir TORCHELASTIC_ENABLE_FILE_TIMER=1 SIG_OUT=$tmp/out "$TRUN" --nproc-per-node 2 --log-dir "$tmp/logs" "$TRUN_REPO/tests/helpers/sig_worker.py" tree \
  >"$tmp/agent.out" 2>"$tmp/agent.err" &
agent=$!
wait_for '[ -f "$tmp/out/ready.0" ] && [ -f "$tmp/out/ready.1" ]' 60 || {
  dump_agent agent "$tmp/agent.out" "$tmp/agent.err"; show_marked; fail "the workers did not start within 60 s"; }
cat "$tmp/out/ready.0"; echo; cat "$tmp/out/ready.1"; echo
echo "job processes before the kill:"; show_marked
"$TRUN_HOST_PY" - "$tmp/out" <<'PY' || fail "the process tree is not what the test needs"
import json, sys
for lr in (0, 1):
    d = json.load(open("%s/ready.%d" % (sys.argv[1], lr)))
    assert d["grandchild_pgid"] == d["grandchild"] != d["pgid"], d   # grandchild leads its own group
    assert d["child_pgid"] == d["pgid"], d                           # child stays in the worker's group
print("tree ok: children in the worker's group, grandchildren in their own groups")
PY
fifo=$(ls "$tmp/tmpdir"/watchdog_timer_* 2>/dev/null | head -n1)
[ -n "$fifo" ] && [ -p "$fifo" ] || fail "no file-timer FIFO under $tmp/tmpdir before the kill: $(ls "$tmp/tmpdir")"
echo "the file-timer FIFO before the kill: $fifo"
before=$(marked_pids); n_before=$(echo "$before" | grep -c .)
echo "$n_before marked processes (agent, its guard, 2 x (worker, sleep, python, sleep))"

t0=$(now)
kill -KILL "$agent"
wait "$agent" 2>/dev/null; agent=""
if wait_for '[ -z "$(marked_pids)" ]' 10; then
  echo "no process of the job remains $(elapsed "$t0") s after SIGKILL to the agent"
else
  echo "still there $(elapsed "$t0") s after SIGKILL to the agent:"; show_marked
  dump_agent agent "$tmp/agent.out" "$tmp/agent.err"
  fail "processes of the job survived the agent's SIGKILL by more than 10 s"
fi
if wait_for '[ ! -e "$fifo" ]' 10; then
  echo "the file-timer FIFO is gone"
else
  fail "the file-timer FIFO $fifo outlived the agent's SIGKILL"
fi
echo "ok: SIGKILL to the agent took down workers, children and own-process-group grandchildren, and its FIFO"

# ---- processes outside the workers' sessions ----
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
stray_pids() { cat "$1"/strays.* 2>/dev/null; }
# running PID: 0 while pid runs (a zombie does not: it is gone, only not yet reaped by whoever inherited it).
running() { [ -r "/proc/$1/stat" ] && ! sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | grep -q '^Z'; }
left_of() { local p; for p in $(stray_pids "$1"); do running "$p" && echo "$p"; done; true; }
# start_strays NAME MODE [trun options...]: the agent (pid in $agent) over stray_worker.py, waits for both
# workers' stray files.
start_strays() {
  local name=$1 mode=$2; shift 2
  D=$tmp/$name; mkdir -p "$D/out"
  note "scenario $name: $mode $*"
  STRAY_OUT=$D/out TRUN_LOG_LEVEL=debug "$TRUN" --nproc-per-node 2 --log-dir "$D/logs" "$@" \
    "$TRUN_REPO/tests/helpers/stray_worker.py" "$mode" >"$D/agent.out" 2>"$D/agent.err" &
  agent=$!
  wait_for '[ -f "$D/out/strays.0.0" ] && [ -f "$D/out/strays.0.1" ]' 60 || {
    dump_agent "$name agent" "$D/agent.out" "$D/agent.err"; fail "$name: the workers did not start within 60 s"; }
  local p
  for p in $(stray_pids "$D/out"); do
    running "$p" || fail "$name: stray $p is not running: the test's worker did not do its part"
  done
  echo "$name: strays $(stray_pids "$D/out" | tr '\n' ' ')(per worker: a setsid child, a double-forked daemon)"
}

start_strays kill wait
wait_for '[ "$(grep -c "left its worker.s session" "$D/agent.err")" -ge 4 ]' 60 ||
  echo "kill: the agent did not say within 60 s that it found the 4 strays; killing it anyway"
t0=$(now)
kill -KILL "$agent"; wait "$agent" 2>/dev/null; agent=""
if wait_for '[ -z "$(left_of "$D/out")" ]' 10; then
  echo "kill: no stray outlives the agent's SIGKILL ($(elapsed "$t0") s)"
else
  dump_agent "kill agent" "$D/agent.out" "$D/agent.err"
  bad "kill: strays $(left_of "$D/out" | tr '\n' ' ')still run 10 s after SIGKILL to the agent"
fi
kill_marked

start_strays term wait
kill -TERM "$agent"
wait_pid_exit "$agent" 120 || fail "term: the agent still runs 120 s after SIGTERM"
agent=""
left=$(left_of "$D/out")
[ "$WAIT_RC" = 1 ] || bad "term: the agent exited $WAIT_RC after SIGTERM, want 1"
if [ -n "$left" ]; then
  dump_agent "term agent" "$D/agent.out" "$D/agent.err"; bad "term: strays $(echo $left) outlive the agent's graceful stop"
else
  echo "term: no stray outlives the graceful stop (exit $WAIT_RC)"
fi
kill_marked

start_strays restart restart --max-restarts 1
wait_pid_exit "$agent" 120 || fail "restart: the agent still runs after 120 s"
agent=""
cat "$D/out"/prev.* 2>/dev/null
[ "$WAIT_RC" = 0 ] || { dump_agent "restart agent" "$D/agent.out" "$D/agent.err"; bad "restart: exit $WAIT_RC, want 0"; }
if [ "$(cat "$D/out"/prev.0 "$D/out"/prev.1 2>/dev/null | grep -c ' gone$')" = 4 ]; then
  echo "restart: none of attempt 0's strays was left when attempt 1 started"
else
  bad "restart: attempt 0's strays still ran in attempt 1"
fi
kill_marked

# ---- descriptors the agent inherited ----
for warm in "" --warm-start; do
  D=$tmp/fds$warm; mkdir -p "$D/out"
  rc=0
  ( exec 9</dev/null 10</dev/null 251</dev/null
    STRAY_OUT=$D/out "$TRUN" --nproc-per-node 2 --log-dir "$D/logs" $warm \
      "$TRUN_REPO/tests/helpers/stray_worker.py" fds >"$D/agent.out" 2>"$D/agent.err" ) || rc=$?
  [ "$rc" = 0 ] || { dump_agent "fds agent" "$D/agent.out" "$D/agent.err"; bad "fds$warm: exit $rc"; }
  for lr in 0 1; do
    fds=$(cat "$D/out/fds.$lr" 2>/dev/null)
    echo "fds${warm:+ $warm}: local rank $lr has: $fds"
    for fd in $fds; do
      [ "$fd" -le 3 ] || bad "fds$warm: local rank $lr holds fd $fd (only 0-2 and the listing's own may be open)"
    done
  done
done
[ "$failures" = 0 ] || fail "$failures check(s) failed"
echo "PASS: SIGKILL to the agent took down workers, children and own-process-group grandchildren; nothing started under a worker outlives a SIGKILL, a SIGTERM or a restart; workers get fds 0-2 only"

#!/usr/bin/env bash
# SIGKILL to the agent while 2 workers run. Each worker has started a child (`sleep 1000`, in the worker's
# process group) and, through a child python, a grandchild `sleep 1000` that moved to its own process group
# (os.setpgid(0, 0)). Once the agent is gone nothing of the job may remain: every process is found by the
# marker TRUN_TEST_MARKER=<uuid> in its environment (/proc/*/environ), so moving to another process group
# hides nothing. Polls until none remains and prints the measured time; fails if any remains after 10 s.
# The agent runs torch's file-timer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1): its FIFO
# (<TMPDIR>/watchdog_timer_<uuid>) is there before the kill and must be gone after it (the guard removes it).
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
echo "PASS: SIGKILL to the agent took down workers, children and own-process-group grandchildren, and its FIFO"

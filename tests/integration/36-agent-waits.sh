#!/usr/bin/env bash
# Every wait of the agent says what it waits for (issue 33; docs/rendezvous.md "Waits and their time-outs").
# Real trun agents on 127.0.0.1; each scenario polls the agent's stderr for its first report (generous safety
# limits; the time it took is printed, never asserted) and checks its content:
#  1. Static node rank 1 of 2 whose --master-addr does not resolve (nosuchhost.invalid): "waiting N s for the
#     rendezvous store at nosuchhost.invalid:PORT", "this is node rank 1 of 2", the name does not resolve with
#     the Kubernetes readiness hint, "time-out in N s (join_timeout)" with N within --rdzv-conf join_timeout
#     (120); the same facts as a "waiting" event (--events: wait=store, cause, left_s); SIGTERM: exit 1 and the
#     error names the last failure.
#  2. Static node rank 1 of 2 whose master port refuses: the cause is "connection refused"; while it waits,
#     --metrics-port serves trun_wait_seconds{wait="store"} > 0.
#  3. Static node rank 0 of 2 alone: "the other nodes of rendezvous round 0 (static, 2 nodes); 1 of 2 nodes
#     joined: node 0 (127.0.0.1); missing node ranks: 1; time-out in".
#  4. One of two c10d nodes: "1 of 2..2 nodes joined: 127.0.0.1 (pid <the agent's pid>)", the join time-out;
#     SIGTERM: the error says what the rendezvous had.
#  4b. A c10d job of 1..2 with one node: the wait is the last call ("the last call ends in N s", N within
#     last_call_timeout 300; event wait=last_call).
#  5. One of two trun-backend nodes: "round 0: 1 of 2..2 nodes joined: 127.0.0.1"; and a spare (trun and
#     c10d backends): a second node of a running 1..1 job says it is a spare, with no time-out (event
#     wait=spare).
#  5c. The c10d exit barrier: of two nodes, the one whose worker is done first reports "for the exit barrier
#     of c10d round 0", "1 of 2 agents reached it"; both exit 0.
#  5d. The end of a static round: node 0, done first, waits for node 1's worker: "for the other nodes' workers
#     to finish round 0", "1 of 2 nodes done; no time-out", events wait=round_end (waiting, then done).
#  6. A worker that ignores SIGTERM (--shutdown-timeout 300): after SIGTERM to the agent, "the workers to exit
#     after SIGTERM", "1 of 1 still run: rank 0 (pid <its pid>)", "(--shutdown-timeout)"; a waiting event
#     wait=workers_stop; a second SIGTERM kills it and the wait's end is an event with state=done.
#  7. A wait that ends at once says nothing: a standalone job that succeeds prints no "waiting" line.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-36.XXXXXX")
agents=()
cleanup() { kill_marked; for p in "${agents[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
note "marker $MARKER"
echo 'print("hello from the worker")' >"$tmp/hello.py"

# start NAME [trun options...]: an agent in the background (pid in $A, files $tmp/NAME.{out,err,events}).
start() {
  local name=$1; shift
  "$TRUN" --log-dir "$tmp/logs-$name" --events "$tmp/$name.events" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  A=$!
  agents+=("$A")
  T0=$(now)
}
# first_line NAME PATTERN: waits (safety limit 90 s) for a "waiting" line matching PATTERN in NAME's stderr;
# the line into $LINE.
first_line() {
  local name=$1 pat=$2
  if ! wait_for 'grep "info: waiting" "$tmp/$name.err" | grep -qF -- "$pat"' 90; then
    dump_agent "$name" "$tmp/$name.out" "$tmp/$name.err"
    bad "$name: no 'waiting' line matching '$pat' within 90 s"
    LINE=""
    return 1
  fi
  LINE=$(grep "info: waiting" "$tmp/$name.err" | grep -m1 -F -- "$pat")
  echo "$name: first report $(elapsed "$T0") s after the scenario began: $LINE"
}
has() { # NAME TEXT: the line holds TEXT (fixed string)
  case "$LINE" in *"$2"*) ;; *) bad "$1: the line lacks '$2': $LINE" ;; esac
}
# stop NAME WANT_RC [ERR_TEXT]: SIGTERM, wait (safety limit 60 s), exit code and the error text.
stop() {
  local name=$1 want=$2 text=${3:-}
  kill -TERM "$A" 2>/dev/null
  if wait_pid_exit "$A" 60; then
    [ "$WAIT_RC" = "$want" ] || bad "$name: exit $WAIT_RC after SIGTERM, want $want"
  else
    bad "$name: still running 60 s after SIGTERM"
  fi
  if [ -n "$text" ] && ! grep -qF -- "$text" "$tmp/$name.err"; then
    dump_agent "$name" "$tmp/$name.out" "$tmp/$name.err"
    bad "$name: stderr lacks '$text'"
  fi
  kill_marked
}
# event NAME PYTHON_CONDITION: some "waiting" event e of NAME's --events file satisfies the condition.
event() {
  "$TRUN_HOST_PY" - "$tmp/$1.events" "$2" <<'EOF' || bad "$1: no waiting event with $2"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if any(eval(sys.argv[2], {}, {"e": e}) for e in evs if e.get("event") == "waiting") else 1)
EOF
}

# 1. An unresolvable --master-addr.
port=$(free_port)
start unresolvable --nnodes 2 --node-rank 1 --master-addr nosuchhost.invalid --master-port "$port" \
  --rdzv-conf join_timeout=120 --nproc-per-node 1 "$tmp/hello.py"
if first_line unresolvable "for the rendezvous store at nosuchhost.invalid:$port"; then
  has unresolvable "this is node rank 1 of 2; node rank 0 serves the store"
  has unresolvable "the name 'nosuchhost.invalid' does not resolve"
  has unresolvable "in Kubernetes a headless Service publishes a pod's name only once the pod is ready"
  has unresolvable "(join_timeout)"
  left=$(sed -n 's/.*time-out in \([0-9]*\) s (join_timeout).*/\1/p' <<<"$LINE")
  { [ -n "$left" ] && [ "$left" -le 120 ] && [ "$left" -gt 0 ]; } || bad "unresolvable: time-out left '$left', want 1..120"
  event unresolvable 'e["wait"] == "store" and "does not resolve" in e.get("cause", "") and 0 < e["left_s"] <= 120 and e["state"] == "waiting"'
fi
stop unresolvable 1 "interrupted while reaching the rendezvous store at nosuchhost.invalid:$port (last failure: the name"

# 2. A refused port, and the metric while the agent waits.
port=$(free_port)
start refused --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" --metrics-port 0 \
  --nproc-per-node 1 "$tmp/hello.py"
if first_line refused "for the rendezvous store at 127.0.0.1:$port"; then
  has refused "last failure: connection refused"
  mport=$("$TRUN_HOST_PY" -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "metrics": print(e["port"]); break' "$tmp/refused.events")
  if [ -z "$mport" ]; then
    bad "refused: no metrics event with the port"
  elif ! wait_for "'$TRUN_HOST_PY' -c 'import urllib.request,sys
t = urllib.request.urlopen(\"http://127.0.0.1:$mport/metrics\", timeout=5).read().decode()
sys.exit(0 if any(l.startswith(\"trun_wait_seconds{wait=\\\"store\\\"} \") and float(l.split()[-1]) > 0 for l in t.splitlines()) else 1)'" 60; then
    bad "refused: /metrics never showed trun_wait_seconds{wait=\"store\"} > 0"
  fi
fi
stop refused 1 "(last failure: connection refused"

# 3. Node rank 0 of a static job alone.
port=$(free_port)
start static0 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" --local-addr 127.0.0.1 \
  --nproc-per-node 1 "$tmp/hello.py"
if first_line static0 "for the other nodes of rendezvous round 0 (static, 2 nodes)"; then
  has static0 "1 of 2 nodes joined: node 0 (127.0.0.1); missing node ranks: 1; time-out in"
  has static0 "(join_timeout)"
  event static0 'e["wait"] == "round" and "missing node ranks: 1" in e.get("have", "")'
fi
stop static0 1 "interrupted by a signal while waiting for the other nodes (1 of 2 nodes joined"

# 4. One of two c10d nodes.
port=$(free_port)
start c10d --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id w36 \
  --local-addr 127.0.0.1 --nproc-per-node 1 "$tmp/hello.py"
if first_line c10d "for the other nodes of rendezvous round 0 of 'w36' (c10d at 127.0.0.1:$port)"; then
  has c10d "1 of 2..2 nodes joined: 127.0.0.1 (pid $A); missing: 1 more to reach 2"
  has c10d "(join_timeout)"
fi
stop c10d 1 "interrupted by a signal (1 of 2..2 nodes joined: 127.0.0.1 (pid $A); missing: 1 more to reach 2)"

# 4b. The last call: a c10d job of 1..2 with its one node in: the wait is the last call, with its time left.
port=$(free_port)
start lastcall --nnodes 1:2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id l36 \
  --local-addr 127.0.0.1 --rdzv-conf last_call_timeout=300 --nproc-per-node 1 "$tmp/hello.py"
if first_line lastcall "for more nodes until the last call of rendezvous round 0 of 'l36'"; then
  has lastcall "; the last call ends in"
  has lastcall "1 of 1..2 nodes joined: 127.0.0.1 (pid $A)"
  lc=$(sed -n 's/.*the last call ends in \([0-9]*\) s.*/\1/p' <<<"$LINE")
  { [ -n "$lc" ] && [ "$lc" -le 300 ]; } || bad "lastcall: last call left '$lc', want 0..300"
  event lastcall 'e["wait"] == "last_call"'
fi
stop lastcall 1 "interrupted by a signal"

# 5. One of two trun-backend nodes.
port=$(free_port)
start fast --nnodes 2 --rdzv-backend trun --rdzv-endpoint "127.0.0.1:$port" --rdzv-id w36 \
  --local-addr 127.0.0.1 --nproc-per-node 1 "$tmp/hello.py"
if first_line fast "for the other nodes of the trun rendezvous 'w36' at 127.0.0.1:$port"; then
  has fast "round 0: 1 of 2..2 nodes joined: 127.0.0.1; missing: 1 more to reach 2"
fi
stop fast 1 "interrupted by a signal"

# 5b. A spare's turn: a job of 1..1 runs (trun and c10d backends); a second node waits as a spare, without a
# time-out.
printf 'import os, time\nopen(os.environ["W36"], "w").close()\ntime.sleep(600)\n' >"$tmp/sleep.py"
spare_case() { # BACKEND TEXT HAS (HAS: what the line has besides, PID standing for the running agent's pid)
  local b=$1 text=$2 what=$3
  port=$(free_port)
  W36=$tmp/full-$b.started start "full-$b" --nnodes 1:1 --rdzv-backend "$b" --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id sp36 --local-addr 127.0.0.1 --rdzv-conf is_host=1 --nproc-per-node 1 "$tmp/sleep.py"
  local full=$A
  wait_for '[ -f "$tmp/full-$b.started" ]' 90 || bad "full-$b: its worker did not start"
  W36=$tmp/spare-$b.started start "spare-$b" --nnodes 1:1 --rdzv-backend "$b" --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id sp36 --local-addr 127.0.0.1 --rdzv-conf is_host=0 --nproc-per-node 1 "$tmp/sleep.py"
  if first_line "spare-$b" "$text"; then
    has "spare-$b" "${what//PID/$full}"
    has "spare-$b" "; no time-out"
    event "spare-$b" 'e["wait"] == "spare" and "left_s" not in e'
  fi
  kill -TERM "$A" # the spare first: stop() would end every marked process, the running job too
  if wait_pid_exit "$A" 60; then
    [ "$WAIT_RC" = 1 ] || bad "spare-$b: exit $WAIT_RC after SIGTERM, want 1"
  else
    bad "spare-$b: still running 60 s after SIGTERM"
  fi
  A=$full
  stop "full-$b" 1
}
spare_case trun "this node is a spare until it ends" "round 0: 2 of 1..1 nodes joined: 127.0.0.1"
spare_case c10d "for a spare's turn in rendezvous round 0 of 'sp36'" "1 of 1..1 nodes joined: 127.0.0.1 (pid PID)"

# 5c. The exit barrier (c10d, 2 nodes): node 1's worker runs until the test has seen node 0 wait (it creates
# $tmp/go; at most 120 s); node 0, done, waits in torch's exit barrier and says how many agents reached it;
# both finish 0.
port=$(free_port)
cat >"$tmp/slow1.py" <<EOF
import os, time
if os.environ["GROUP_RANK"] == "1":
    for _ in range(1200):
        if os.path.exists("$tmp/go"):
            break
        time.sleep(0.1)
EOF
for g in 0 1; do
  start "barrier$g" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id b36 \
    --local-addr 127.0.0.1 --rdzv-conf "is_host=$((1 - g))" --nproc-per-node 1 "$tmp/slow1.py"
  bpid[$g]=$A
done
# Which agent got group rank 0 is the rendezvous's choice: the one that reports the barrier is the early one.
if wait_for 'grep -qF "for the exit barrier of c10d round 0" "$tmp/barrier0.err" "$tmp/barrier1.err"' 120; then
  LINE=$(grep -hF "for the exit barrier of c10d round 0" "$tmp/barrier0.err" "$tmp/barrier1.err" | head -1)
  echo "barrier: $LINE"
  has barrier "the other 1 agents to finish; 1 of 2 agents reached it; time-out in"
else
  dump_agent barrier0 "$tmp/barrier0.out" "$tmp/barrier0.err"; dump_agent barrier1 "$tmp/barrier1.out" "$tmp/barrier1.err"
  bad "barrier: no exit barrier report within 120 s"
fi
touch "$tmp/go"
for g in 0 1; do
  if wait_pid_exit "${bpid[$g]}" 120; then
    [ "$WAIT_RC" = 0 ] || bad "barrier$g: exit $WAIT_RC, want 0"
  else
    bad "barrier$g: still running after 120 s"
  fi
done
kill_marked

# 5d. The end of a static round: node 0's worker is done first; it waits for node 1's (until $tmp/go) and
# says how many nodes are done, without a time-out; both finish 0.
port=$(free_port)
rm -f "$tmp/go"
for g in 0 1; do
  start "end$g" --nnodes 2 --node-rank "$g" --master-addr 127.0.0.1 --master-port "$port" --local-addr 127.0.0.1 \
    --nproc-per-node 1 "$tmp/slow1.py"
  bpid[$g]=$A
done
T0=$(now)
if first_line end0 "for the other nodes' workers to finish round 0"; then
  has end0 "1 of 2 nodes done; no time-out"
  event end0 'e["wait"] == "round_end"'
fi
touch "$tmp/go"
for g in 0 1; do
  if wait_pid_exit "${bpid[$g]}" 120; then
    [ "$WAIT_RC" = 0 ] || bad "end$g: exit $WAIT_RC, want 0"
  else
    bad "end$g: still running after 120 s"
  fi
done
event end0 'e["wait"] == "round_end" and e["state"] == "done"'
kill_marked

# 6. A worker that ignores SIGTERM.
mkdir -p "$tmp/sig"
SIG_OUT=$tmp/sig start ignore --standalone --nproc-per-node 1 --shutdown-timeout 300 \
  "$TRUN_REPO/tests/helpers/sig_worker.py" ignore
if wait_for '[ -f "$tmp/sig/ready.0" ]' 60; then
  wpid=$("$TRUN_HOST_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$tmp/sig/ready.0")
  kill -TERM "$A"
  T0=$(now)
  if first_line ignore "for the workers to exit after SIGTERM"; then
    has ignore "1 of 1 still run: rank 0 (pid $wpid); SIGKILL at the time-out"
    has ignore "(--shutdown-timeout)"
    event ignore 'e["wait"] == "workers_stop" and e["state"] == "waiting"'
  fi
  kill -TERM "$A" # the second one kills the workers now
  if wait_pid_exit "$A" 60; then
    [ "$WAIT_RC" = 1 ] || bad "ignore: exit $WAIT_RC, want 1"
  else
    bad "ignore: still running 60 s after the second SIGTERM"
  fi
  event ignore 'e["wait"] == "workers_stop" and e["state"] == "done" and e["done"] is True'
else
  dump_agent ignore "$tmp/ignore.out" "$tmp/ignore.err"
  bad "ignore: the worker did not start within 60 s"
fi
kill_marked

# 7. Nothing to say: a quick standalone job.
start quick --standalone --nproc-per-node 1 "$tmp/hello.py"
if wait_pid_exit "$A" 120; then
  [ "$WAIT_RC" = 0 ] || bad "quick: exit $WAIT_RC, want 0"
  if grep -q "info: waiting" "$tmp/quick.err"; then bad "quick: a wait that ended at once reported: $(grep 'info: waiting' "$tmp/quick.err")"; fi
else
  bad "quick: still running after 120 s"
fi

[ "$failures" = 0 ] || exit 1
echo "PASS: every wait reported what it waits for, what it has, the cause and the time-out"

#!/usr/bin/env bash
# trun --rdzv-status: a job's rendezvous seen from outside (issues 33 and 38; docs/rendezvous.md). Real agents
# on 127.0.0.1; every check polls with a generous safety limit and never asserts a time. Every job below is
# started with --nnodes 2 (one node missing) and looked at WITHOUT repeating its size or backend: the view
# takes both from the store (the job record every trun agent publishes; torch's state for torchrun).
#  1. Static job of 2, node 0 alone, asked with --master-addr / --master-port only: "(static)", "joined: 1 of
#     2", "node rank 0: 127.0.0.1, joined N s ago", "missing node ranks: 1" (options, then PET_* variables);
#     asked with --nnodes 3 --rdzv-backend c10d: both named as contradicted, the store's shown; then node 1
#     comes and the job still succeeds on both nodes (the look changed nothing).
#  2. c10d job of 2, one trun agent: "(c10d)", "participants: 1 of 2..2", "rank 0: 127.0.0.1 pid <its pid>",
#     "missing: 1 more node(s)", "last call: not started"; a second agent started with --nnodes 2:3 says the
#     job was started with another size.
#  3. c10d job of 2 whose one node is a real torchrun 1.13 agent (host torch), asked without a backend, size or
#     torch_version: its pickled state decodes (the legacy wire found), with the torchrun agent's pid, and
#     "max nodes: unknown" / "missing: unknown" (torchrun publishes no size); with --nnodes 2 the size is the
#     command line's, said so.
#  4. trun-backend job of 2, one node: "(trun)", "joined: 1 of 2..2", "node 1: 127.0.0.1 pid <its pid>, 1
#     workers", "missing: 1 more node(s)".
#  5. trun-backend job of 1..2 with both nodes running, then one agent SIGKILLed: the view names the lost node
#     (its address and cause) in the round it was lost.
#  6. Exit codes: 1 for a refused port and an unresolvable name (with the cause); 2 for --standalone and a bad
#     --nnodes; 0 and "no rendezvous" for an empty store; 1 and "does not decode" for a c10d state that is
#     garbage, whose job record is garbage too ("not one trun writes": ignored) (written with trun-store cli
#     into a trun-store serve); a static round with no job record: its size unknown, and a published hang
#     shown escaped.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-37.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
note "marker $MARKER"
echo 'print("hello from the worker")' >"$tmp/hello.py"
cat >"$tmp/sleep.py" <<'PY'
import os, time
open(os.path.join(os.environ["OUT37"], "started.%s" % os.environ["GROUP_RANK"]), "w").close()
time.sleep(600)
PY
mkdir -p "$tmp/run5"
export OUT37=$tmp/run5

# status NAME [options...]: runs trun --rdzv-status; output in $tmp/NAME.st{out,err}, exit code in $RC.
status() {
  local name=$1; shift
  RC=0
  timeout 60 "$TRUN" --rdzv-status "$@" >"$tmp/$name.stout" 2>"$tmp/$name.sterr" || RC=$?
}
# until_status NAME TEXT [options...]: repeats status until its stdout holds TEXT (safety limit 90 s).
until_status() {
  local name=$1 text=$2; shift 2
  local t0; t0=$(now)
  while :; do
    status "$name" "$@"
    grep -qF -- "$text" "$tmp/$name.stout" && { echo "$name: '$text' after $(elapsed "$t0") s"; return 0; }
    if awk -v a="$t0" -v b="$(now)" 'BEGIN{exit !(b-a>90)}'; then
      echo "=== $name status (exit $RC):"; cat "$tmp/$name.stout" "$tmp/$name.sterr"
      for f in "$tmp"/*.err "$tmp"/*.log; do [ -f "$f" ] && { echo "=== $f:"; tail -n 20 "$f"; }; done
      bad "$name: the status never showed '$text'"
      return 1
    fi
    sleep 0.5
  done
}
shows() { # NAME TEXT: the last status output holds TEXT
  grep -qF -- "$2" "$tmp/$1.stout" || { echo "=== $1 status:"; cat "$tmp/$1.stout"; bad "$1: the status lacks '$2'"; }
}
want_rc() { [ "$RC" = "$2" ] || { cat "$tmp/$1.stout" "$tmp/$1.sterr"; bad "$1: --rdzv-status exit $RC, want $2"; }; }
agent() { # NAME [trun options...]: an agent in the background, pid in $A
  local name=$1; shift
  "$TRUN" --log-dir "$tmp/logs-$name" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  A=$!
  pids+=("$A")
}

# 1. Static, node 0 alone; then node 1.
port=$(free_port)
agent s0 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" --local-addr 127.0.0.1 \
  --nproc-per-node 1 "$tmp/hello.py"
s0=$A
until_status static "joined: 1 of 2" --master-addr 127.0.0.1 --master-port "$port"
want_rc static 0
shows static "rendezvous 'none' (static) at 127.0.0.1:$port"
shows static "job: --rdzv-backend static --nnodes 2 --nproc-per-node 1 (published by 127.0.0.1 pid $s0"
shows static "round: 0, open (nodes are joining)"
shows static "missing node ranks: 1"
grep -qE "^  node rank 0: 127\.0\.0\.1, joined [0-9]+ s ago$" "$tmp/static.stout" || bad "static: no 'node rank 0: 127.0.0.1, joined N s ago' line"
cat "$tmp/static.stout"
PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=$port status static-env
want_rc static-env 0
shows static-env "joined: 1 of 2"
shows static-env "missing node ranks: 1"
status static-wrong --nnodes 3 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port"
want_rc static-wrong 0
shows static-wrong "note: this command line says --rdzv-backend c10d, but the store holds a static rendezvous"
shows static-wrong "note: this command line says --nnodes 3, but the job was started with --nnodes 2"
shows static-wrong "joined: 1 of 2"
shows static-wrong "missing node ranks: 1"
agent s1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" --local-addr 127.0.0.1 \
  --nproc-per-node 1 "$tmp/hello.py"
s1=$A
for p in "$s0" "$s1"; do
  if wait_pid_exit "$p" 120; then
    [ "$WAIT_RC" = 0 ] || bad "static: agent $p exited $WAIT_RC after the look, want 0"
  else
    bad "static: agent $p still runs after 120 s"
  fi
done
kill_marked

# 2. c10d, one trun agent of 2.
port=$(free_port)
agent c1 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id s37 --local-addr 127.0.0.1 \
  --rdzv-conf is_host=1 --nproc-per-node 1 "$tmp/hello.py"
c1=$A
until_status c10d "participants: 1 of 2..2" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id s37
want_rc c10d 0
shows c10d "rendezvous 's37' (c10d) at 127.0.0.1:$port"
shows c10d "  rank 0: 127.0.0.1 pid $c1"
shows c10d "missing: 1 more node(s) to reach the minimum of 2"
shows c10d "last call: not started"
cat "$tmp/c10d.stout"
# A node told another size hears that the job's store holds the first node's.
agent c2 --nnodes 2:3 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id s37 --local-addr 127.0.0.1 \
  --nproc-per-node 1 "$tmp/hello.py"
c2=$A
wait_for 'grep -qF "job '"'"'s37'"'"' was started as --rdzv-backend c10d --nnodes 2:2" "$tmp/c2.err"' 60 ||
  { cat "$tmp/c2.err"; bad "c10d: a node started with --nnodes 2:3 did not say the job's size differs"; }
for p in "$c1" "$c2"; do kill -TERM "$p" 2>/dev/null; wait_pid_exit "$p" 60 || bad "c10d: agent $p outlived SIGTERM by 60 s"; done
kill_marked

# 3. c10d, the one node a torchrun 1.13 agent.
port=$(free_port)
(cd "$TRUN_REPO" && exec "$TRUN_HOST_PY" tests/tools/torchrun113.py --nnodes 2 --nproc_per_node 1 \
  --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --rdzv_id t37 --rdzv_conf is_host=1 "$tmp/hello.py") >"$tmp/torchrun.log" 2>&1 &
tr=$!
pids+=("$tr")
until_status torchrun "participants: 1 of an unknown number" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id t37
want_rc torchrun 0
shows torchrun "rendezvous 't37' (c10d) at 127.0.0.1:$port"
shows torchrun " pid $tr"
shows torchrun "max nodes: unknown: torchrun does not publish it"
shows torchrun "missing: unknown"
cat "$tmp/torchrun.stout"
status torchrun-sized --nnodes 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id t37 --rdzv-conf torch_version=1.13
want_rc torchrun-sized 0
shows torchrun-sized "participants: 1 of 2..2 (the size from this command line: the store does not say)"
shows torchrun-sized "missing: 1 more node(s) to reach the minimum of 2"
kill -TERM "$tr" 2>/dev/null; wait_pid_exit "$tr" 60 || bad "torchrun outlived SIGTERM by 60 s"
kill_marked

# 4. trun backend, one node of 2.
port=$(free_port)
agent f1 --nnodes 2 --rdzv-backend trun --rdzv-endpoint "127.0.0.1:$port" --rdzv-id f37 --local-addr 127.0.0.1 \
  --rdzv-conf is_host=1 --nproc-per-node 1 "$tmp/hello.py"
until_status fast "joined: 1 of 2..2" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id f37
want_rc fast 0
shows fast "rendezvous 'f37' (trun) at 127.0.0.1:$port"
shows fast "round: 0, open (nodes are joining)"
shows fast "  node 1: 127.0.0.1 pid $A, 1 workers"
shows fast "missing: 1 more node(s) to reach the minimum of 2"
cat "$tmp/fast.stout"
kill -TERM "$A"; wait_pid_exit "$A" 60 || bad "fast: the agent outlived SIGTERM by 60 s"
kill_marked

# 5. A lost node (trun backend, 1..2 nodes, both running; one SIGKILLed).
port=$(free_port)
opts=(--nnodes 1:2 --rdzv-backend trun --rdzv-endpoint "127.0.0.1:$port" --rdzv-id l37 --local-addr 127.0.0.1
  --nproc-per-node 1 --max-restarts 3)
agent l0 "${opts[@]}" --rdzv-conf last_call_timeout=60,is_host=1 "$tmp/sleep.py"
l0=$A
until_status lost-join "joined: 1 of 1..2" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id l37
setsid "$TRUN" --log-dir "$tmp/logs-l1" "${opts[@]}" --rdzv-conf last_call_timeout=60,is_host=0 "$tmp/sleep.py" >"$tmp/l1.out" 2>"$tmp/l1.err" &
l1=$!
pids+=("$l1")
until_status lost-run "committed with 2 nodes" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id l37
# Both nodes' workers run (so their liveness runs too) before one goes.
wait_for '[ -f "$tmp/run5/started.0" ] && [ -f "$tmp/run5/started.1" ]' 90 || bad "lost: the workers of both nodes did not start"
kill -KILL -- "-$l1" 2>/dev/null
until_status lost "round 0: node " --rdzv-endpoint "127.0.0.1:$port" --rdzv-id l37
want_rc lost 0
grep -qE "^  round 0: node [01] \(127\.0\.0\.1\), .+, seen by .+ s ago$" "$tmp/lost.stout" ||
  bad "lost: no 'round 0: node G (127.0.0.1), CAUSE, seen by ...' line"
cat "$tmp/lost.stout"
kill -TERM "$l0"; wait_pid_exit "$l0" 60 || bad "lost: node 0 outlived SIGTERM by 60 s"
kill_marked

# 6. Exit codes and bad stores.
port=$(free_port)
status refused --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id x
want_rc refused 1
grep -qF "cannot reach the rendezvous store at 127.0.0.1:$port: connection refused" "$tmp/refused.sterr" ||
  { cat "$tmp/refused.sterr"; bad "refused: the error lacks the cause"; }
status unresolvable --nnodes 2 --master-addr nosuchhost.invalid --master-port 29500
want_rc unresolvable 1
grep -qF "the name 'nosuchhost.invalid' does not resolve" "$tmp/unresolvable.sterr" ||
  { cat "$tmp/unresolvable.sterr"; bad "unresolvable: the error lacks the cause"; }
status standalone --standalone
want_rc standalone 2
grep -qF -- "--rdzv-status needs the job's rendezvous store" "$tmp/standalone.sterr" || bad "standalone: no reason on stderr"
status badnodes --nnodes x --rdzv-endpoint 127.0.0.1:1
want_rc badnodes 2
"$TRUN_BUILD/trun-store" serve --host 127.0.0.1 --port 0 --ready-file "$tmp/store.port" >"$tmp/store.log" 2>&1 &
pids+=($!)
wait_for '[ -s "$tmp/store.port" ]' 30 || fail "trun-store serve did not start"
sport=$(cat "$tmp/store.port")
for b in c10d trun static; do
  status "empty-$b" --nnodes 2 --rdzv-backend "$b" --rdzv-endpoint "127.0.0.1:$sport" --master-addr 127.0.0.1 \
    --master-port "$sport" --rdzv-id nobody
  want_rc "empty-$b" 0
  shows "empty-$b" "no rendezvous 'nobody' in this store yet"
done
"$TRUN_BUILD/trun-store" cli --target "127.0.0.1:$sport" set torch.rendezvous.junk 'not a pickle at all' >/dev/null ||
  fail "trun-store cli set failed"
"$TRUN_BUILD/trun-store" cli --target "127.0.0.1:$sport" set trun/junk/job '{"backend": "etcd"}' >/dev/null ||
  fail "trun-store cli set failed"
status junk --rdzv-endpoint "127.0.0.1:$sport" --rdzv-id junk
want_rc junk 1
grep -qF "does not decode" "$tmp/junk.sterr" || { cat "$tmp/junk.sterr"; bad "junk: no 'does not decode' error"; }
shows junk "job: its record in the store is not one trun writes (its backend is not static, c10d or trun): ignored"
shows junk "rendezvous 'junk' (c10d) at 127.0.0.1:$sport"
# A static round without a job record (agents older than the record): the size is unknown, said so; a
# hang published under /trun/<run_id>/hang is shown, its control bytes escaped.
"$TRUN_BUILD/trun-store" cli --target "127.0.0.1:$sport" set trun/old/r0/joined 1 >/dev/null &&
  "$TRUN_BUILD/trun-store" cli --target "127.0.0.1:$sport" set trun/old/r0/host/0 10.0.0.7 >/dev/null &&
  "$TRUN_BUILD/trun-store" cli --target "127.0.0.1:$sport" set trun/old/hang "$(printf 'rank 3 stopped\033[31m')" >/dev/null ||
  fail "trun-store cli set failed"
status old --master-addr 127.0.0.1 --master-port "$sport" --rdzv-id old
want_rc old 0
shows old "rendezvous 'old' (static) at 127.0.0.1:$sport"
shows old "  node rank 0: 10.0.0.7"
shows old "joined: 1 of an unknown number (no agent of this job published its size)"
shows old "missing node ranks: unknown"
shows old 'hang: rank 3 stopped\x1b[31m'

[ "$failures" = 0 ] || exit 1
echo "PASS: --rdzv-status showed static, c10d (trun and torchrun 1.13 agents) and trun rendezvous with the job's size and backend from the store, a lost node, a hang, and its exit codes"

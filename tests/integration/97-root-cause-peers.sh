#!/usr/bin/env bash
# The root cause on every node of a two-node job, for each backend (static, c10d, trun): two trun agents on
# 127.0.0.1 x 1 gloo worker (torch 1.13); agent A's worker exits 3, agent B's loses its peer ("Connection
# closed by peer": it fails too, or is stopped first). --max-restarts 1 (a round with a restart left, then the restarts run out), and for c10d
# also 0 (the store's host exits at once: c10d has no exit barrier after a failure).
#  - A's console names its rank ("root cause: rank R (local 0, pid P) on H: exited with code 3"); so does B's,
#    with A's node rank ("... on H (node rank G): exited with code 3"), and no other root cause.
#  - Events: A writes one `failure` event per round, naming R and P; B writes none, and one `remote_failure`
#    per round with known true, the same rank, pid and A's node rank.
#  - The failure report (node rank 0's for static and trun; A's own for c10d) has R as its root cause.
#  - No store error lines on either node (TCPStore request errors, "could not close the c10d rendezvous").
# Exit: 0 pass, 1 fail.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-96.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }

run_pair() { # backend max_restarts
  local be=$1 mr=$2 d=$tmp/$1-$2 port n opts
  port=$(free_port)
  mkdir -p "$d"
  note "$be, --max-restarts $mr, port $port: agent A's worker exits 3"
  for n in A B; do
    case $be in
      static) opts=(--node-rank "$([ $n = A ] && echo 0 || echo 1)" --master-addr 127.0.0.1 --master-port "$port") ;;
      *) opts=(--rdzv-backend "$be" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "rc$port") ;;
    esac
    PEER_FAIL=$([ $n = A ] && echo 1 || echo 0) "$TRUN" --nnodes 2 --nproc-per-node 1 --max-restarts "$mr" \
      --monitor-interval 0.1 "${opts[@]}" --events "$d/ev$n.jsonl" "$TRUN_REPO/tests/helpers/peer_fail.py" \
      >"$d/out$n" 2>"$d/err$n" &
    pids+=($!)
    [ $n = A ] && { AP=$!; sleep 0.3; } || BP=$! # A first: A hosts the c10d and trun stores
  done
  if ! wait_agents 60 30 peer_fail.py "$AP" "$BP"; then
    bad "$be/$mr: the agents did not both exit"
  fi
  for n in A B; do dump_agent "$be/$mr agent $n" "$d/out$n" "$d/err$n"; done
  for p in "$AP" "$BP"; do
    [ "${AGENT_RC[$p]:-}" = 1 ] || bad "$be/$mr: agent pid $p exited ${AGENT_RC[$p]:-?}, want 1"
  done
  "$TRUN_HOST_PY" - "$d" "$be" "$mr" <<'PY' || bad "$be/$mr: the root cause is not the same on both nodes (above)"
import json, re, sys
d, be, mr = sys.argv[1], sys.argv[2], int(sys.argv[3])
ok = True
def no(msg):
    global ok
    ok = False
    print("  " + msg)
ev = {n: [json.loads(l) for l in open("%s/ev%s.jsonl" % (d, n))] for n in "AB"}
err = {n: open("%s/err%s" % (d, n)).read() for n in "AB"}
rounds = mr + 1
# A's culprit in each round: its worker that exited 3.
culprits = [e for e in ev["A"] if e["event"] == "worker_exit" and e.get("exit_code") == 3]
if len(culprits) != rounds:
    no("agent A's workers exited 3 in %d rounds, want %d" % (len(culprits), rounds))
    sys.exit(1)
ga = [e["group_rank"] for e in ev["A"] if e["event"] == "rendezvous_end"][-1]
for n in "AB":
    kinds = [e["event"] for e in ev[n]]
    fail = [e for e in ev[n] if e["event"] == "failure"]
    remote = [e for e in ev[n] if e["event"] == "remote_failure"]
    print("agent %s: %d failure, %d remote_failure events" % (n, len(fail), len(remote)))
    want = fail if n == "A" else remote
    other = remote if n == "A" else fail
    if other:
        no("agent %s wrote %s events %s, want none" % (n, "remote_failure" if n == "A" else "failure", other))
    if len(want) != rounds:
        no("agent %s wrote %d %s events, want %d" % (n, len(want), "failure" if n == "A" else "remote_failure", rounds))
    for e, c in zip(want, culprits):
        if (e.get("rank"), e.get("local_rank"), e.get("pid"), e.get("node_rank"), e.get("exit_code")) != (
                c["rank"], 0, c["pid"], ga, 3):
            no("agent %s's event %s does not name rank %d (local 0, pid %d) of node rank %d, exit code 3" %
               (n, e, c["rank"], c["pid"], ga))
        if n == "B" and e.get("known") is not True:
            no("agent B's remote_failure event is not known: %s" % e)
    # The console: one root cause line per round, A's rank.
    lines = re.findall(r"root cause: (.*)", err[n])
    if len(lines) != rounds:
        no("agent %s printed %d root cause lines, want %d: %s" % (n, len(lines), rounds, lines))
    for line, c in zip(lines, culprits):
        node = "" if n == "A" else r" \(node rank %d\)" % ga
        if not re.fullmatch(r"rank %d \(local 0, pid %d\) on \S+%s: exited with code 3" % (c["rank"], c["pid"], node), line):
            no("agent %s's root cause line %r does not name rank %d (local 0, pid %d)%s" % (n, line, c["rank"], c["pid"], node))
    for pat in (r"TCPStore .*(reading the reply|closed connection|Connection reset)", r"could not close the c10d",
                r"could not tell the other nodes"):
        if re.search(pat, err[n]):
            no("agent %s printed store noise: %s" % (n, re.search(".*" + pat + ".*", err[n]).group(0)))
# The failure report: printed by node rank 0 (static, trun) or by A (c10d); its root cause is A's rank.
reporter = "A" if be == "c10d" or ga == 0 else "B"
last = culprits[-1]
root = err[reporter].split("Root Cause (first observed failure):", 1)
if len(root) < 2 or not re.search(r"rank\s*:\s*%d \(local_rank: 0\)\s*\n\s*exitcode\s*:\s*3 \(pid: %d\)" %
                                  (last["rank"], last["pid"]), root[1]):
    no("agent %s's failure report does not have rank %d (pid %d) as its root cause" % (reporter, last["rank"], last["pid"]))
print("%s/%d: %s" % (be, mr, "ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
  kill_marked
}

# --max-restarts 1: a round with a restart left, then the restarts run out; c10d also without any (its
# store's host exits at once, with no exit barrier after a failure).
run_pair static 1
run_pair trun 1
run_pair c10d 0
run_pair c10d 1

[ $failures = 0 ] || fail "$failures check(s) failed"
echo "PASS: every node of every backend names the rank that failed first, once, without store noise"

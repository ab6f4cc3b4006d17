#!/usr/bin/env bash
# Static rendezvous, 3 trun agents on 127.0.0.1 (one "node" each), 2 workers per node, gloo all-reduce over
# the 6 ranks through the agent's store (TORCHELASTIC_USE_AGENT_STORE=True, torch 1.13 at $TRUN_HOST_PY).
# The agents start in a shuffled order (node 2, then node 1, then node 0 which hosts the store) to prove that
# nodes may come up before the store host. Checks: every agent exits 0; the ranks seen are exactly 0..5;
# node i ran RANK 2i (LOCAL_RANK 0) and 2i+1 (LOCAL_RANK 1) with GROUP_RANK i, WORLD_SIZE 6; every rank's
# all-reduce gave 0+1+...+5 = 15.
set -u
. "$(dirname "$0")/../agent/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-50.XXXXXX")
pids=()
cleanup() { kill_marked; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/out"
port=$(free_port)
note "marker $MARKER, master port $port"

start_agent() { # node
  MN_OUT=$tmp/out "$TRUN" --nnodes 3 --node-rank "$1" --master-addr 127.0.0.1 --master-port "$port" \
    --nproc-per-node 2 --log-dir "$tmp/logs$1" "$TRUN_REPO/tests/agent/mn_worker.py" \
    >"$tmp/agent$1.out" 2>"$tmp/agent$1.err" &
  pids[$1]=$!
}
start_agent 2
sleep 1   # not a timing assumption: only makes the shuffled order likely to be real
start_agent 1
sleep 1
start_agent 0

rcs=()
for n in 0 1 2; do
  wait_pid_exit "${pids[$n]}" 300 || { show_marked; fail "agent $n still runs after 300 s"; }
  rcs[$n]=$WAIT_RC
done
for n in 0 1 2; do
  echo "=== agent $n exit ${rcs[$n]}; stdout:"; cat "$tmp/agent$n.out"; echo "=== agent $n stderr:"; cat "$tmp/agent$n.err"
done
for n in 0 1 2; do [ "${rcs[$n]}" = 0 ] || fail "agent $n exited ${rcs[$n]}, want 0"; done

"$TRUN_HOST_PY" - "$tmp" <<'PY' || fail "rank checks failed"
import json, os, re, sys
tmp = sys.argv[1]
bad = []
seen = {}
for f in sorted(os.listdir(tmp + "/out")):
    d = json.load(open(os.path.join(tmp, "out", f)))
    seen[int(d["RANK"])] = d
if sorted(seen) != list(range(6)):
    bad.append("ranks recorded: %s, want 0..5" % sorted(seen))
for node in range(3):
    lines = open("%s/agent%d.out" % (tmp, node)).read().splitlines()
    printed = sorted(int(m.group(1)) for m in (re.match(r"MNW RANK=(\d+) ", l) for l in lines) if m)
    if printed != [2 * node, 2 * node + 1]:
        bad.append("node %d printed ranks %s, want %s" % (node, printed, [2 * node, 2 * node + 1]))
    for lr in (0, 1):
        r = 2 * node + lr
        d = seen.get(r)
        if d is None:
            continue
        want = {"LOCAL_RANK": str(lr), "GROUP_RANK": str(node), "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2",
                "GROUP_WORLD_SIZE": "3", "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1",
                "phase": "done", "allreduce": 15.0}
        for k, v in want.items():
            if d.get(k) != v:
                bad.append("rank %d: %s=%r, want %r" % (r, k, d.get(k), v))
        if ("MNW rank %d all_reduce=15 expect=15" % r) not in lines:
            bad.append("node %d stdout lacks rank %d's all_reduce=15 line" % (node, r))
for b in bad:
    print("  " + b)
print("rank checks: %d problem(s)" % len(bad))
sys.exit(1 if bad else 0)
PY
echo "PASS: 3 agents (started 2,1,0), ranks 0..5 placed 2i,2i+1 per node, all-reduce 15 everywhere"

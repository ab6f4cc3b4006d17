#!/usr/bin/env bash
# Static rendezvous, 3 trun agents on 127.0.0.1 (one "node" each), 2 workers per node, gloo all-reduce over
# the 6 ranks through the agent's store (TORCHELASTIC_USE_AGENT_STORE=True, torch 1.13 at $TRUN_HOST_PY).
# The agents start in a shuffled order (node 2, then node 1, then node 0 which hosts the store) to prove that
# nodes may come up before the store host. Checks: every agent exits 0; the ranks seen are exactly 0..5;
# node i ran RANK 2i (LOCAL_RANK 0) and 2i+1 (LOCAL_RANK 1) with GROUP_RANK i, WORLD_SIZE 6; every rank's
# all-reduce gave 0+1+...+5 = 15. Node 0 hosts its store with --store-threads 3, so the ranks' connections are
# spread over three loops (WAIT wake-ups crossing threads).
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
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
    --nproc-per-node 2 --store-threads 3 --log-dir "$tmp/logs$1" "$TRUN_REPO/tests/helpers/mn_worker.py" \
    >"$tmp/agent$1.out" 2>"$tmp/agent$1.err" &
  pids[$1]=$!
}
run_three_agents_shuffled 127.0.0.1
echo "PASS: 3 agents (started 2,1,0), store on 3 threads, ranks 0..5 placed 2i,2i+1 per node, all-reduce 15 everywhere"

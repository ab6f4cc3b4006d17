"""Checks the records of tests/helpers/mn_worker.py after a successful static multi-node run.

  mn_check_ranks.py TMP NNODES NPROC MASTER_ADDR [ATTEMPT]

TMP/out holds rank<R>.attempt<A>.json, TMP/agent<i>.out node i's stdout. Node i must have run global ranks
i*NPROC .. i*NPROC+NPROC-1 (LOCAL_RANK 0..NPROC-1, GROUP_RANK i), the ranks seen must be exactly
0..NNODES*NPROC-1, and every rank's all-reduce of its rank must equal the sum of all ranks.
"""
import json
import os
import re
import sys

tmp, nnodes, nproc, master = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
attempt = int(sys.argv[5]) if len(sys.argv) > 5 else 0
world = nnodes * nproc
total = float(world * (world - 1) // 2)
bad = []
seen = {}
for f in sorted(os.listdir(tmp + "/out")):
    m = re.match(r"rank(\d+)\.attempt(\d+)\.json$", f)
    if m and int(m.group(2)) == attempt:
        seen[int(m.group(1))] = json.load(open(os.path.join(tmp, "out", f)))
if sorted(seen) != list(range(world)):
    bad.append("ranks recorded in attempt %d: %s, want 0..%d" % (attempt, sorted(seen), world - 1))
for node in range(nnodes):
    lines = open("%s/agent%d.out" % (tmp, node)).read().splitlines()
    want_ranks = list(range(node * nproc, node * nproc + nproc))
    printed = sorted(int(m.group(1)) for m in (re.match(r"MNW RANK=(\d+) .*ATTEMPT=%d$" % attempt, l)
                                                for l in lines) if m)
    if printed != want_ranks:
        bad.append("node %d printed ranks %s, want %s" % (node, printed, want_ranks))
    for lr in range(nproc):
        r = node * nproc + lr
        d = seen.get(r)
        if d is None:
            continue
        want = {"RANK": str(r), "LOCAL_RANK": str(lr), "GROUP_RANK": str(node), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(nproc), "GROUP_WORLD_SIZE": str(nnodes),
                "TORCHELASTIC_RESTART_COUNT": str(attempt), "MASTER_ADDR": master,
                "TORCHELASTIC_USE_AGENT_STORE": "True", "phase": "done", "allreduce": total}
        for k, v in want.items():
            if d.get(k) != v:
                bad.append("rank %d: %s=%r, want %r" % (r, k, d.get(k), v))
        if ("MNW rank %d all_reduce=%g expect=%g" % (r, total, total)) not in lines:
            bad.append("node %d stdout lacks rank %d's all_reduce=%g line" % (node, r, total))
for b in bad:
    print("  " + b)
print("rank checks (attempt %d, %d nodes x %d): %d problem(s)" % (attempt, nnodes, nproc, len(bad)))
sys.exit(1 if bad else 0)

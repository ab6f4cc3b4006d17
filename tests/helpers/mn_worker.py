"""Worker for the multi-node agent tests (tests/integration/50..52).

Prints its rank variables, records them in $MN_OUT/rank<RANK>.attempt<TORCHELASTIC_RESTART_COUNT>.json,
then (unless told to fail) joins a gloo process group over env:// (the agent's store) and all-reduces
its rank: every rank must get sum(0..WORLD_SIZE-1).

Env knobs:
  MN_OUT          directory for the record files (required)
  MN_FAIL_RANK    global rank that exits MN_FAIL_CODE (default 3) in attempt MN_FAIL_ATTEMPT (default 0)
"""
import json
import os
import sys

env = os.environ
rank = int(env["RANK"])
attempt = int(env["TORCHELASTIC_RESTART_COUNT"])
info = {k: env.get(k) for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                                "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID")}
info["pid"] = os.getpid()
print("MNW RANK=%s LOCAL_RANK=%s GROUP_RANK=%s WORLD_SIZE=%s ATTEMPT=%d" %
      (info["RANK"], info["LOCAL_RANK"], info["GROUP_RANK"], info["WORLD_SIZE"], attempt), flush=True)
out = env["MN_OUT"]


def record(extra):
    info.update(extra)
    path = os.path.join(out, "rank%d.attempt%d.json" % (rank, attempt))
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.rename(path + ".tmp", path)


record({"phase": "started"})

fail_rank = env.get("MN_FAIL_RANK")
if fail_rank is not None and int(fail_rank) == rank and attempt == int(env.get("MN_FAIL_ATTEMPT", "0")):
    code = int(env.get("MN_FAIL_CODE", "3"))
    print("MNW rank %d failing with exit code %d in attempt %d" % (rank, code, attempt), flush=True)
    record({"phase": "failed", "exit": code})
    sys.exit(code)

import datetime
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=300))
assert dist.get_rank() == rank, (dist.get_rank(), rank)
assert dist.get_world_size() == int(env["WORLD_SIZE"])
t = torch.tensor([float(rank)])
dist.all_reduce(t)
world = int(env["WORLD_SIZE"])
expect = world * (world - 1) / 2
print("MNW rank %d all_reduce=%g expect=%g" % (rank, t.item(), expect), flush=True)
# Everyone checks it got the right sum, then a barrier so nobody leaves early.
dist.barrier()
dist.destroy_process_group()
record({"phase": "done", "allreduce": t.item(), "expect": expect})
sys.exit(0 if t.item() == expect else 5)

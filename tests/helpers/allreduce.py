"""Worker for the agent integration tests: a gloo all-reduce that every rank checks.

argv: OUT_DIR [--fail-rank R] [--fail-code C]
Each rank all-reduces (rank+1) and checks the sum is WORLD_SIZE*(WORLD_SIZE+1)/2, then (with a barrier)
writes OUT_DIR/ok.<attempt>.<rank> holding the torch version. With --fail-rank R, rank R exits with code C
(default 3) after the all-reduce in attempt 0 (TORCHELASTIC_RESTART_COUNT=0): the store then holds the
keys of attempt 0 when attempt 1 initialises again.
"""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--fail-code", type=int, default=3)
a = p.parse_args()

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
assert dist.get_rank() == rank and dist.get_world_size() == world, (dist.get_rank(), dist.get_world_size())
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
if t.item() != want:
    sys.exit("rank %d: all_reduce gave %r, want %r" % (rank, t.item(), want))
dist.barrier()
if attempt == 0 and rank == a.fail_rank:
    print("rank %d: failing attempt %d on purpose with exit code %d" % (rank, attempt, a.fail_code), flush=True)
    os._exit(a.fail_code)
with open(os.path.join(a.out, "ok.%d.%d" % (attempt, rank)), "w") as f:
    f.write(torch.__version__)
dist.destroy_process_group()
print("rank %d/%d attempt %d: all_reduce ok (torch %s)" % (rank, world, attempt, torch.__version__), flush=True)

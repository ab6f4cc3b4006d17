"""Worker for the elasticity tests (tests/integration/66): joins gloo over env://, records
"<WORLD_SIZE> <RANK> <TORCHELASTIC_RESTART_COUNT>" in OUT/world.<EL_HOST>.<pid>, then all-reduces every 0.2 s
until OUT/finish exists (everyone leaves in the same iteration: the flag is all-reduced too).
argv: OUT
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
env = os.environ
world, rank, restart = env["WORLD_SIZE"], env["RANK"], env["TORCHELASTIC_RESTART_COUNT"]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
t = torch.tensor([1.0])
dist.all_reduce(t)
assert int(t.item()) == int(world), (t.item(), world)
with open(os.path.join(out, "world.%s.%d" % (env.get("EL_HOST", "?"), os.getpid())), "w") as f:
    f.write("%s %s %s\n" % (world, rank, restart))
while True:
    flag = torch.tensor([1.0 if os.path.exists(os.path.join(out, "finish")) else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        break
    time.sleep(0.2)
print("elastic worker rank %s of %s done" % (rank, world), flush=True)

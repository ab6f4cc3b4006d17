"""Worker that trains "forever": a gloo all-reduce every 0.1 s until stopped (tests 55 and 57).

Env: LOOP_OUT (directory). After its first all-reduce each rank writes LOOP_OUT/ready.<attempt>.<RANK> (its
pid; attempt = TORCHELASTIC_RESTART_COUNT) and after every step LOOP_OUT/step.<RANK> ("<attempt> <step>"),
so a test can see training go on. Every step checks the sum (WORLD_SIZE*(WORLD_SIZE-1)/2) and exits 5 on a
wrong one. LOOP_STEPS (default 0 = no end) bounds the steps; then it exits 0.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

env = os.environ
rank = int(env["RANK"])
world = int(env["WORLD_SIZE"])
attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
out = env["LOOP_OUT"]
steps = int(env.get("LOOP_STEPS", "0"))
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
want = world * (world - 1) / 2
step = 0
while steps == 0 or step < steps:
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    if t.item() != want:
        sys.exit("rank %d step %d: all_reduce gave %r, want %r" % (rank, step, t.item(), want))
    if step == 0:
        with open(os.path.join(out, "ready.%d.%d" % (attempt, rank)), "w") as f:
            f.write(str(os.getpid()))
        print("LOOP rank %d/%d attempt %d ready (pid %d)" % (rank, world, attempt, os.getpid()), flush=True)
    step += 1
    tmp = os.path.join(out, ".step.%d" % rank)
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (attempt, step))
    os.replace(tmp, os.path.join(out, "step.%d" % rank))
    time.sleep(0.1)
print("LOOP rank %d done after %d steps" % (rank, step), flush=True)

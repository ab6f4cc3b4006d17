"""Worker for the store flood tests (28, 29): a gloo all-reduce of rank + 1 every 0.1 s (checked: 3.0 on two
ranks) until the file OUT/stop appears; after each step it writes its step count to OUT/step.<RANK> (atomically),
and at the end prints "rank R done after N steps". Usage: stop_worker.py OUT
"""
import datetime, os, sys, time
import torch
import torch.distributed as dist
out, rank = sys.argv[1], int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
step = 0
while not os.path.exists(os.path.join(out, "stop")):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == 3.0, t.item()
    step += 1
    with open(os.path.join(out, ".step.%d" % rank), "w") as f:
        f.write(str(step))
    os.replace(os.path.join(out, ".step.%d" % rank), os.path.join(out, "step.%d" % rank))
    dist.barrier()  # both ranks see the stop file in the same step
    time.sleep(0.1)
print("rank %d done after %d steps" % (rank, step), flush=True)

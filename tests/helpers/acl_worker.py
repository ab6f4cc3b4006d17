"""Worker for the store-access test (tests/integration/81-*): gloo all-reduce across the nodes through the
agent's store, then OUT_DIR/ok.<rank>, then waits (printing) until OUT_DIR/go exists. argv: OUT_DIR"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
if t.item() != world * (world + 1) / 2:
    sys.exit("rank %d: all_reduce gave %r" % (rank, t.item()))
open(os.path.join(out, "ok.%d" % rank), "w").close()
print("rank %d: all_reduce ok, store %s:%s" % (rank, os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]), flush=True)
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.2)
dist.barrier()
dist.destroy_process_group()

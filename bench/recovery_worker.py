"""Worker of the recovery benchmark (bench/recovery.py): a gloo all-reduce every 0.1 s until stopped.

After its first all-reduce each process appends "<world size> <unix time>" to REC_OUT/first.<node>, so the
benchmark reads when training resumed in the smaller world from the worker's own clock (the nodes are network
namespaces of one machine: one clock). Env: REC_OUT, REC_NODE (the node's name; the host name otherwise).
"""
import datetime
import os
import socket
import time

import torch
import torch.distributed as dist

out = os.environ["REC_OUT"]
node = os.environ.get("REC_NODE") or socket.gethostname()
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=1800))
world = dist.get_world_size()
first = True
while True:
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    if first:
        with open(os.path.join(out, "first." + node), "a") as f:
            f.write("%d %.6f\n" % (world, time.time()))
        first = False
    time.sleep(0.1)

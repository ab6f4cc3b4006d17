"""Worker of the recovery benchmarks (bench/recovery.py, bench/gpu_recovery.py): an all-reduce every 0.1 s until
stopped (gloo; REC_BACKEND=nccl on the GPU of LOCAL_RANK).

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
backend = os.environ.get("REC_BACKEND", "gloo")  # nccl: bench/gpu_recovery.py
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(dev)
dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=1800))
world = dist.get_world_size()
first = True
while True:
    t = torch.ones(1, device=dev)
    dist.all_reduce(t)
    if backend == "nccl":
        torch.cuda.synchronize()  # the all-reduce done, not just queued
    if first:
        with open(os.path.join(out, "first." + node), "a") as f:
            f.write("%d %.6f\n" % (world, time.time()))
        first = False
    time.sleep(0.1)

#!/usr/bin/env python3
"""One rank of a gloo all-reduce job whose store is an external TCPStore server (trun-store).

Environment (as torchrun would set it): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_USE_AGENT_STORE=True (every rank, rank 0 included, is a client of MASTER_ADDR:MASTER_PORT),
and for torch 1.13 TORCHELASTIC_RESTART_COUNT (1.13 prefixes every key with /worker/attempt_<count>).
Each rank all-reduces [rank+1]*4 and checks every element equals 1+2+...+WORLD_SIZE, then does a second
all-reduce on a new group and a barrier, prints one line and exits 0 (1 on a wrong result).
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    tag = "torch %s rank %d/%d" % (torch.__version__, rank, world)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    want = world * (world + 1) / 2
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    ok = bool((t == want).all())
    print("%s: all_reduce -> %s (want %s)" % (tag, t.tolist(), want), flush=True)
    # A second group exercises the group-name keys of the store as well.
    g = dist.new_group(list(range(world)))
    t2 = torch.full((2,), float(10 * (rank + 1)))
    dist.all_reduce(t2, group=g)
    ok2 = bool((t2 == 10 * want).all())
    print("%s: new_group all_reduce -> %s (want %s)" % (tag, t2.tolist(), 10 * want), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if not (ok and ok2):
        print("%s: WRONG RESULT" % tag, flush=True)
        return 1
    print("%s: ok" % tag, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

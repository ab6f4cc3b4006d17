"""All-reduce over gloo: each rank contributes rank+1; every rank checks the sum.

Run it the way torchrun would:  trun --standalone --nproc-per-node 2 examples/allreduce.py
"""
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo")  # env:// with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from trun
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    ok = bool(torch.all(t == expected))
    print(f"rank {rank}/{world} on {os.uname().nodename}: all_reduce -> {t.tolist()} "
          f"(expected {expected}) {'OK' if ok else 'WRONG'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

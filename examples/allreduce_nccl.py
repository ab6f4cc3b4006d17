"""NCCL all-reduce bandwidth, one process per GPU: prints busbw like nccl-tests (2(n-1)/n * bytes / time).

  trun --standalone --nproc-per-node gpu examples/allreduce_nccl.py [--sizes 1M,64M,1G] [--iters 20]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        x = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / args.iters
        busbw = 2 * (n - 1) / n * size / dt / 1e9
        if rank == 0:
            print(f"AR n={n} bytes={size} time_us={dt * 1e6:.1f} busbw={busbw:.1f} GB/s", flush=True)
    x = torch.full((4,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    assert x[0].item() == n * (n + 1) / 2, x
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

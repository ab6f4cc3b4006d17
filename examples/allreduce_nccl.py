"""NCCL all-reduce bandwidth, one process per GPU: prints busbw like nccl-tests (2(n-1)/n * bytes / time).

  trun --standalone --nproc-per-node gpu examples/allreduce_nccl.py [--sizes 1M,64M,1G] [--iters 20] [--graph]

Each size: 5 warm-up all-reduces, then --iters timed back to back and one synchronize (nccl-tests' default
loop). Eager mode times torch's Python call per all-reduce too, which dominates below a few MiB; --graph
captures the --iters all-reduces in one CUDA graph and times its replay, so that the GPU work alone is
measured, as nccl-tests does from C (falls back to eager, with a note, where capture fails).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def graph_time(x, iters):
    """Seconds per all-reduce of x from one replay of a CUDA graph holding iters of them; None when capture
    fails (the reason is printed once by rank 0)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                dist.all_reduce(x)
        g.replay()  # a warm replay, then the timed one
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / iters
    except Exception as e:  # noqa: BLE001 - any capture failure: measure eagerly instead
        if dist.get_rank() == 0 and not getattr(graph_time, "noted", False):
            print(f"# CUDA graph capture failed ({type(e).__name__}: {e}); timing eagerly", flush=True)
            graph_time.noted = True
        torch.cuda.synchronize()
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--graph", action="store_true", help="time a CUDA graph of --iters all-reduces")
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
        mode, dt = "eager", None
        if args.graph:
            dt = graph_time(x, args.iters)
            mode = "graph" if dt is not None else "eager"
        if dt is None:
            t0 = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / args.iters
        busbw = 2 * (n - 1) / n * size / dt / 1e9
        if rank == 0:
            print(f"AR n={n} bytes={size} time_us={dt * 1e6:.2f} busbw={busbw:.3f} GB/s mode={mode}", flush=True)
    x = torch.full((4,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    assert x[0].item() == n * (n + 1) / 2, x
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

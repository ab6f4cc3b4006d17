"""GPU-box worker for bench/gpu.py's `stall` step: a hung NCCL collective under trun --stall-timeout.

argv: OUT_DIR. Attempt 0: the last rank sleeps silently; every other rank enters an NCCL all-reduce and
synchronises (it hangs waiting for the last rank). Attempt 1: every rank all-reduces and exits 0. The step
records which rank the detector flags first (the sleeper, or a rank spinning in NCCL / CUDA sync) and the
CPU time the waiting ranks used, to calibrate the 5% CPU threshold (docs/observability.md, "Hang detection").
"""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=600))
t = torch.ones(1 << 20, device="cuda")
dist.all_reduce(t)  # communicators up
torch.cuda.synchronize()
print("rank %d attempt %d: ready" % (rank, attempt), flush=True)
if attempt == 0:
    if rank == world - 1:
        while True:
            time.sleep(3600)
    # CPU seconds / wall seconds spent waiting, rewritten every second (the rank dies by SIGTERM).
    c0, w0 = time.process_time(), time.time()

    def note():
        while True:
            with open(os.path.join(out, "cpu.%d" % rank), "w") as f:
                f.write("%.3f %.3f\n" % (time.process_time() - c0, time.time() - w0))
            time.sleep(1)

    threading.Thread(target=note, daemon=True).start()
    dist.all_reduce(t)
    torch.cuda.synchronize()
dist.all_reduce(t)
torch.cuda.synchronize()
print("rank %d attempt %d: all_reduce ok" % (rank, attempt), flush=True)
dist.destroy_process_group()

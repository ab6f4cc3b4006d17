"""A collective hang on purpose (bench/gpu_hang.py): every rank all-reduces 50 times, then, in the job's first
attempt only, the last rank hangs as HANG_KIND says: `sleep` (never enters the next all-reduce), `mismatch`
(broadcasts while the others all-reduce), `spin` (queues a GPU kernel that never ends, then the all-reduce).
A restarted attempt all-reduces 50 more times and exits 0. PG_TIMEOUT: torch's process-group timeout (s)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
lr = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(lr)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "60"))))
r, w = dist.get_rank(), dist.get_world_size()
t = torch.ones(1 << 20, device="cuda")
for _ in range(50):
    dist.all_reduce(t)
torch.cuda.synchronize()
print(f"rank {r}: healthy phase done (attempt {attempt})", flush=True)
if attempt > 0:
    dist.destroy_process_group()
    raise SystemExit(0)
time.sleep(3)
kind = os.environ.get("HANG_KIND", "sleep")
if r == w - 1:
    if kind == "sleep":
        time.sleep(3600)
    elif kind == "spin":
        torch.cuda._sleep(1 << 62)
        dist.all_reduce(t)
        torch.cuda.synchronize()
    else:
        dist.broadcast(t, 0)
        torch.cuda.synchronize()
else:
    dist.all_reduce(t)
    torch.cuda.synchronize()
print(f"rank {r}: not hung?", flush=True)

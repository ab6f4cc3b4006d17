"""A worker for tests 93-agent-hang and 95-agent-hang-port (torch 1.13, gloo): joins the process group, writes
the NCCL_RAS_ADDR it was given ("" when none) to <dir>/ras_addr.<rank>, its pid to
<dir>/pid.<rank> (the RAS stand-in serves it; the file is replaced, never half-written) and
<dir>/attempt.<restart count>.<rank>, then sleeps until SIGTERM (the hang the stand-in pretends; a sleeping
rank is what NCCL RAS shows as a rank behind). HANG_EXIT_RANK=R: rank R exits 0 at once instead (a rank that
left while its peers wait for it). Usage: hang_worker.py DIR"""
import os
import sys
import time

import torch.distributed as dist

out = sys.argv[1]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
tmp = os.path.join(out, "ras_addr.%d.tmp" % rank)
with open(tmp, "w") as f:
    f.write("%s\n" % os.environ.get("NCCL_RAS_ADDR", ""))
os.rename(tmp, os.path.join(out, "ras_addr.%d" % rank))
tmp = os.path.join(out, "pid.%d.tmp" % rank)
with open(tmp, "w") as f:
    f.write("%d\n" % os.getpid())
os.rename(tmp, os.path.join(out, "pid.%d" % rank))
open(os.path.join(out, "attempt.%d.%d" % (attempt, rank)), "w").close()
print("rank %d attempt %d: pid %d asleep" % (rank, attempt, os.getpid()), flush=True)
if os.environ.get("HANG_EXIT_RANK") == str(rank):
    sys.exit(0)
while True:
    time.sleep(3600)

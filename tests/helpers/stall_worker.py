"""Worker for the hang-detection test (tests/integration/80-*): a gloo job whose rank 1 hangs in attempt 0.

argv: OUT_DIR
Every rank registers faulthandler for SIGUSR1 (what --stall-signal SIGUSR1 is for) and joins gloo.
Attempt 0: rank 1 sleeps forever without output; rank 0 waits for it in an asynchronous all-reduce,
printing a line every 0.5 s (so only rank 1 is stalled).
Attempt 1: every rank all-reduces and checks the sum, writes OUT_DIR/ok.1.<rank>, then prints a line
every 0.3 s (output keeps it live) until OUT_DIR/go exists, and exits 0.
"""
import datetime
import faulthandler
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
faulthandler.register(signal.SIGUSR1, all_threads=True)
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
print("rank %d attempt %d: joined" % (rank, attempt), flush=True)


def hang_here_forever():
    while True:
        time.sleep(3600)


if attempt == 0:
    if rank == 1:
        hang_here_forever()
    # Rank 0 waits for rank 1 in an all-reduce but stays visibly alive (a line every 0.5 s), so that the
    # detector has exactly one stalled worker to find.
    work = dist.all_reduce(torch.tensor([1.0]), async_op=True)
    while not work.is_completed():
        print("rank 0: still waiting for rank 1", flush=True)
        time.sleep(0.5)
    sys.exit("rank 0: the all-reduce of attempt 0 finished, but rank 1 never joins it")
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
if t.item() != world * (world + 1) / 2:
    sys.exit("rank %d: all_reduce gave %r" % (rank, t.item()))
with open(os.path.join(out, "ok.%d.%d" % (attempt, rank)), "w") as f:
    f.write(torch.__version__)
print("rank %d attempt %d: all_reduce ok" % (rank, attempt), flush=True)
while not os.path.exists(os.path.join(out, "go")):
    print("rank %d: waiting for the test" % rank, flush=True)
    time.sleep(0.3)
dist.destroy_process_group()

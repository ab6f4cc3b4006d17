"""Worker for the key-space test (tests/integration/82-*): gloo all-reduce across the nodes, then global rank
1 plays a worker that writes the agents' keys through torch's own TCPStore client at MASTER_ADDR:MASTER_PORT
(the round's end key, and "x/alive/0" then leaves): OUT_DIR/attack.1 says whether the store took the write
("written") or closed the connection ("refused: ..."). Then OUT_DIR/ok.<rank>; waits until OUT_DIR/go
exists; a barrier; OUT_DIR/done.<rank>. ok.<rank> says whether TRUN_RDZV_TOKEN reached the worker. argv: OUT_DIR END_KEY"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

out, end_key = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=180))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
if t.item() != world * (world + 1) / 2:
    sys.exit("rank %d: all_reduce gave %r" % (rank, t.item()))
if rank == 1:
    s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=datetime.timedelta(seconds=30))
    s.set("x/alive/0", "worker 1 0")
    try:
        s.set(end_key, "gone:0")
        s.add("keys82/probe", 1)  # SET has no reply: a closed connection shows on the next request
        verdict = "written"
    except Exception as e:  # the store closed the connection
        verdict = "refused: %s" % e
    del s
    with open(os.path.join(out, "attack.1"), "w") as f:
        f.write(verdict + "\n")
    print("rank 1: worker write of %s: %s" % (end_key, verdict), flush=True)
with open(os.path.join(out, "ok.%d" % rank), "w") as f:
    f.write("token in env: %s\n" % ("TRUN_RDZV_TOKEN" in os.environ))
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.2)
dist.barrier()
open(os.path.join(out, "done.%d" % rank), "w").close()
dist.destroy_process_group()

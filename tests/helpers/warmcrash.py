# A worker for tests/integration/39-warm-start-restart.sh: records how it started, joins a gloo group and
# all-reduces; in attempt 0, local rank 1 then waits for OUT_DIR/go and exits 3 (the crash).
# Usage: warmcrash.py OUT_DIR. Writes OUT_DIR/start.<attempt>.<local rank> = "preloaded=<bool> pid=<pid>"
# before anything else, and OUT_DIR/ok.<attempt>.<rank> after the all-reduce; attempt 1 then waits for
# OUT_DIR/end (the test reads the agent's metrics meanwhile).
import sys

preloaded = "torch" in sys.modules
import os
import time

out = sys.argv[1]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
lr, rank, world = (int(os.environ[k]) for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE"))
with open("%s/start.%d.%d" % (out, attempt, lr), "w") as f:
    f.write("preloaded=%s pid=%d\n" % (preloaded, os.getpid()))

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t.item()
open("%s/ok.%d.%d" % (out, attempt, rank), "w").close()
if attempt == 0 and lr == 1:
    deadline = time.time() + 600
    while not os.path.exists(out + "/go") and time.time() < deadline:
        time.sleep(0.05)
    print("crashing attempt 0 on purpose", flush=True)
    os._exit(3)
deadline = time.time() + 600
while attempt > 0 and not os.path.exists(out + "/end") and time.time() < deadline:
    time.sleep(0.05)
dist.barrier()

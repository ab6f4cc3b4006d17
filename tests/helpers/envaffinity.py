"""Worker for 35-explain: joins the job's gloo process group (real torch.distributed, env://), all-reduces its
rank, and writes OUT_DIR/worker.<LOCAL_RANK>.json with its whole os.environ, os.sched_getaffinity(0) as a
sorted list, the torch version and the all-reduce result. argv: OUT_DIR"""
import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
out = {
    "env": dict(os.environ),
    "affinity": sorted(os.sched_getaffinity(0)),
    "torch": torch.__version__,
    "sum": t.item(),
    "world": dist.get_world_size(),
}
dist.destroy_process_group()
path = os.path.join(sys.argv[1], "worker.%s.json" % os.environ["LOCAL_RANK"])
with open(path + ".tmp", "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
os.rename(path + ".tmp", path)

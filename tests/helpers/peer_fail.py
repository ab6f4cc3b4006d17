"""Worker for 97-root-cause-peers: every rank joins a gloo group and all-reduces in a loop; the workers of the
agent that has PEER_FAIL=1 in its environment exit 3 after 5 all-reduces (in every attempt), and the others
lose their peer ("Connection closed by peer": they fail too, as victims) or are stopped.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
culprit = os.environ.get("PEER_FAIL") == "1"
for i in range(100000):
    if culprit and i == 5:
        print("rank %s fails on purpose" % os.environ["RANK"], flush=True)
        sys.exit(3)
    x = torch.ones(1)
    dist.all_reduce(x)
    time.sleep(0.02)

"""torchrun's own c10d rendezvous, N agents as threads of one process (torch 1.13 or 2.x), for make bench.

usage: rdzv_torch.py HOST PORT N RUN_ID [JOIN_TIMEOUT_S (600)]
Each thread builds torchelastic's DynamicRendezvousHandler on its own TCPStore client (is_host=false: the
store is served by trun-store, so every contender talks to the same server) and calls next_rendezvous().
Checks every agent got a distinct rank 0..N-1 of N, then prints
`rdzv mode=torchrun-<version> agents=N seconds=<last join -> last assigned> total_seconds=<first join -> last>`.
Exit: 0 ok, 1 a join failed or the ranks are wrong.
"""
import sys
import threading
import time

import torch
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

host, port, n, run_id = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
join_timeout = sys.argv[5] if len(sys.argv) > 5 else "600"
results = [None] * n
start = threading.Barrier(n)


def agent(i):
    try:
        params = RendezvousParameters(
            backend="c10d",
            endpoint=f"{host}:{port}",
            run_id=run_id,
            min_nodes=n,
            max_nodes=n,
            is_host="false",
            join_timeout=join_timeout,
            read_timeout="600",
        )
        backend, store = create_backend(params)
        handler = create_handler(store, backend, params)
        start.wait()
        t0 = time.monotonic()
        info = handler.next_rendezvous()
        t1 = time.monotonic()
        if isinstance(info, tuple):  # 1.13: (store, rank, world)
            rank, world = info[1], info[2]
        else:
            rank, world = info.rank, info.world_size
        results[i] = (t0, t1, rank, world)
    except Exception as e:  # reported below
        results[i] = e
        try:
            start.abort()
        except Exception:
            pass


threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
bad = [r for r in results if not isinstance(r, tuple)]
if bad:
    print(f"rdzv_torch: {len(bad)} of {n} agents failed: {bad[0]!r}", file=sys.stderr)
    sys.exit(1)
ranks = sorted(r[2] for r in results)
if ranks != list(range(n)) or any(r[3] != n for r in results):
    print(f"rdzv_torch: wrong ranks {ranks[:10]}...", file=sys.stderr)
    sys.exit(1)
first = min(r[0] for r in results)
last_join = max(r[0] for r in results)
last_done = max(r[1] for r in results)
ver = torch.__version__.split("+")[0].replace(".0a0", "")
print(f"rdzv mode=torchrun-{ver} agents={n} seconds={last_done - last_join:.4f} total_seconds={last_done - first:.4f}")

"""Spare takeover benchmark (issue 30): from a node's loss until a spare trains with the survivors.

Four nodes in network namespaces (bench/recovery.py's Cluster: 10.252.0.1..4, host names node<N>), one
launcher agent each with `--nnodes 3:3 --max-restarts 3` (torchrun: `--monitor_interval 0.1`), default
settings otherwise, one gloo worker each doing an all-reduce every 0.1 s (bench/recovery_worker.py). Nodes
0-2 train; node 3 is started once they do and waits as a spare (SETTLE seconds, so that it waits when the
loss comes). Then node 2 is lost (crash: every process of its namespace SIGKILLed; silent: its link down).
The time is from the loss to the latest of the first all-reduces of nodes 0, 1 and 3 in a world of 3, read
from the workers' own clock; a run with no takeover within CAP seconds counts as none.
Needs root (namespaces); used by bench.py (`make bench`, `--only spare`), or alone:
  spare.py [--reps N] [--launchers trun-c10d,trun-trun,torchrun-1.13] [--kinds crash,silent]
"""
import argparse
import os
import sys
import tempfile
import time

from recovery import (CAP, HOST_PY, SETUP, Cluster, agent_cmd, firsts, interleaved, lose_node2, teardown,
                      wait_until)

LAUNCHERS = ("trun-c10d", "trun-trun", "torchrun-1.13")
KINDS = ("crash", "silent")
SETTLE = 5.0  # seconds the spare waits before the loss


def one_run(cl, launcher, kind, port, cap=CAP):
    """Seconds from the loss of node 2 to nodes 0, 1 and the spare 3 training in a world of 3; None if not
    within cap."""
    d = tempfile.mkdtemp(prefix=f"spare-{launcher}-{kind}.", dir=cl.dir)
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", GLOO_SOCKET_IFNAME="eth0", PYTHON_EXEC=HOST_PY,
               REC_OUT=d)
    agents = []

    def start(n):
        agents.append(cl.run(n, agent_cmd(launcher, n, port, f"spare{port}", "3:3"), dict(env, REC_NODE=f"node{n}"),
                             os.path.join(d, f"agent{n}")))

    try:
        for n in range(3):
            start(n)
        if wait_until(lambda: True if all(any(w == 3 for w, _ in firsts(d, n)) for n in range(3)) else None,
                      SETUP) is None:
            tail = open(os.path.join(d, "agent0.err")).read()[-400:]
            raise RuntimeError(f"spare bench {launcher} {kind}: no world of 3 in {SETUP:.0f} s; node 0: {tail}")
        start(3)
        time.sleep(SETTLE)
        if firsts(d, 3):
            raise RuntimeError(f"spare bench {launcher} {kind}: the spare ran workers in a full round")
        return lose_node2(cl, kind, d, 3, (0, 1, 3), cap)
    finally:
        teardown(cl, kind, agents)


def spare_bench(reps, launchers=LAUNCHERS, kinds=KINDS, cap=CAP):
    """One row per launcher and kind: the median of `reps` runs, interleaved (A B C A B C ...)."""
    return interleaved("spare", Cluster(4), one_run, reps, launchers, kinds, 29800, cap)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--launchers", default=",".join(LAUNCHERS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    for r in spare_bench(args.reps, args.launchers.split(","), args.kinds.split(",")):
        print(r)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

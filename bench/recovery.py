"""Recovery benchmark (issue 22): from a node's loss until the survivors train again in the smaller world.

Three nodes, each a network namespace (10.252.0.1..3 on a bridge in a namespace of its own) with a UTS and
mount namespace of its own (host name node<N>, an /etc/hosts naming the three), so that torchrun 1.13, which
publishes its host's FQDN, runs unchanged. One launcher agent per node, default settings but
`--nnodes 2:3 --max-restarts 3` (and torchrun's `--monitor_interval 0.1`, newer torch's default), one gloo
worker each doing an all-reduce every 0.1 s (bench/recovery_worker.py). Then, STEADY seconds later (the job
steady), node 2 is lost:
  crash   every process in node 2's namespace is SIGKILLed (its kernel resets their connections);
  silent  node 2's link goes down (nothing is reset: power loss, a dead NIC, a kernel panic).
The time is from the loss to the later of the two survivors' first all-reduce in a world of 2, read from the
workers' own clock (one machine, one clock); a run with no recovery within CAP seconds counts as none.
Needs root (namespaces); used by bench.py (`make bench`, `--only recovery`), or alone:
  recovery.py [--reps N] [--launchers trun-c10d,trun-trun,trun-c10d-warm,trun-trun-warm,torchrun-1.13]
              [--kinds crash,silent]
trun-<backend>-warm runs trun with --warm-start (issue 31): the survivors' new workers come from the pool.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRUN = os.path.join(REPO, "build", "trun")
HOST_PY = os.environ.get("TRUN_HOST_PY", "/usr/bin/python3")
WORKER = os.path.join(REPO, "bench", "recovery_worker.py")
TORCHRUN113 = [HOST_PY, os.path.join(REPO, "tests", "tools", "torchrun113.py")]
LAUNCHERS = ("trun-c10d", "trun-trun", "trun-c10d-warm", "trun-trun-warm", "torchrun-1.13")
KINDS = ("crash", "silent")
NET = "10.252.0"
CAP = 100.0  # seconds: the measurements gave up at 100 s
SETUP = 120.0  # seconds for the first world of 3
# Seconds from the first world of 3 to the loss: a job in its steady state. --warm-start's pool processes
# that replace the ones the first workers took start with those workers and import torch for about 2 s on
# the 2-core box; a loss within that time would measure their import, not the recovery.
STEADY = 3.0


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Cluster:
    """The namespaces (three, or `nodes`) and their bridge; `close` kills whatever runs in them and deletes them."""

    def __init__(self, nodes=3):
        tag = str(os.getpid())
        self.bridge = f"trunrb-{tag}"
        self.hosts = [f"trunrn{i}-{tag}" for i in range(nodes)]
        self.dir = tempfile.mkdtemp(prefix="trun-bench-recovery.")
        self.hosts_file = os.path.join(self.dir, "hosts")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{NET}.{i + 1} node{i}\n" for i in range(nodes)))
        try:
            ip("netns", "add", self.bridge)
            ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
            ip("-n", self.bridge, "link", "set", "br0", "up")
            for i, h in enumerate(self.hosts):
                ip("netns", "add", h)
                ip("-n", h, "link", "set", "lo", "up")
                ip("-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", f"vb{i}", "netns", self.bridge)
                ip("-n", h, "addr", "add", f"{NET}.{i + 1}/24", "dev", "eth0")
                ip("-n", h, "link", "set", "eth0", "up")
                ip("-n", self.bridge, "link", "set", f"vb{i}", "master", "br0")
                ip("-n", self.bridge, "link", "set", f"vb{i}", "up")
        except subprocess.CalledProcessError as e:
            self.close()
            raise RuntimeError(f"recovery bench: `ip {' '.join(e.cmd[1:])}` failed: {e.stderr.decode().strip()} "
                               "(needs root and network namespaces)") from None

    def run(self, n, cmd, env, out):
        """Starts cmd as node n: its namespace, host name node<n>, the cluster's /etc/hosts."""
        wrap = ["ip", "netns", "exec", self.hosts[n], "unshare", "--uts", "--mount", "--", "sh", "-c",
                'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"', f"node{n}",
                self.hosts_file] + cmd
        return subprocess.Popen(wrap, env=env, stdout=open(out + ".out", "w"), stderr=open(out + ".err", "w"))

    def kill(self, n):
        pids = subprocess.run(["ip", "netns", "pids", self.hosts[n]], capture_output=True, text=True).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def link(self, n, state):
        ip("-n", self.bridge, "link", "set", f"vb{n}", state)

    def close(self):
        for n in range(len(self.hosts)):
            self.kill(n)
        for h in self.hosts + [self.bridge]:
            subprocess.run(["ip", "netns", "del", h], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


def agent_cmd(launcher, n, port, run_id, nnodes="2:3"):
    ep = f"{NET}.1:{port}"
    if launcher.startswith("trun-"):
        # trun-<backend>-warm: the same with --warm-start (issue 31).
        backend, warm = launcher[5:].split("-")[0], launcher.endswith("-warm")
        return [TRUN, "--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", backend, "--rdzv-endpoint",
                ep, "--rdzv-id", run_id, "--max-restarts", "3"] + (["--warm-start"] if warm else []) + [WORKER]
    return TORCHRUN113 + ["--nnodes", nnodes, "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                          ep, "--rdzv_id", run_id, "--max_restarts", "3", "--monitor_interval", "0.1", WORKER]


def firsts(d, node):
    """(world, time) of each first all-reduce node <node>'s workers logged."""
    try:
        with open(os.path.join(d, f"first.node{node}")) as f:
            return [(int(w), float(t)) for w, t in (line.split() for line in f if line.strip())]
    except (OSError, ValueError):
        return []


def wait_until(pred, limit):
    end = time.time() + limit
    while time.time() < end:
        v = pred()
        if v is not None:
            return v
        time.sleep(0.05)
    return None


def one_run(cl, launcher, kind, port, cap=CAP):
    """Seconds from the loss of node 2 to both survivors training in a world of 2; None if not within cap."""
    d = tempfile.mkdtemp(prefix=f"{launcher}-{kind}.", dir=cl.dir)
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", GLOO_SOCKET_IFNAME="eth0", PYTHON_EXEC=HOST_PY,
               REC_OUT=d)
    agents = []
    try:
        for n in range(3):
            agents.append(cl.run(n, agent_cmd(launcher, n, port, f"rec{port}"), dict(env, REC_NODE=f"node{n}"),
                                 os.path.join(d, f"agent{n}")))
        if wait_until(lambda: True if all(any(w == 3 for w, _ in firsts(d, n)) for n in range(3)) else None,
                      SETUP) is None:
            tail = open(os.path.join(d, "agent0.err")).read()[-400:]
            raise RuntimeError(f"recovery bench {launcher} {kind}: no world of 3 in {SETUP:.0f} s; node 0: {tail}")
        time.sleep(STEADY)
        return lose_node2(cl, kind, d, 2, (0, 1), cap)
    finally:
        teardown(cl, kind, agents)


def lose_node2(cl, kind, d, world, nodes, cap):
    """Loses node 2 (kind crash or silent); seconds until every one of `nodes` all-reduced in a world of
    `world` after that, None if not within cap."""
    t0 = time.time()
    if kind == "crash":
        cl.kill(2)
    else:
        cl.link(2, "down")

    def resumed():
        ts = [min((t for w, t in firsts(d, n) if w == world and t > t0), default=None) for n in nodes]
        return None if None in ts else max(ts) - t0

    return wait_until(resumed, cap)


def teardown(cl, kind, agents):
    """Kills everything in the cluster's namespaces, reaps the agents, brings node 2's link back."""
    for n in range(len(cl.hosts)):
        cl.kill(n)
    for a in agents:
        a.wait()
    if kind == "silent":
        cl.link(2, "up")


def interleaved(what, cl, run, reps, launchers, kinds, port, cap):
    """One row per launcher and kind: the median of `reps` runs of run(cl, launcher, kind, port, cap),
    interleaved (A B C A B C ...); the cluster is closed at the end."""
    samples = {}
    try:
        for rep in range(reps):
            for kind in kinds:
                for launcher in launchers:
                    port += 1
                    s = run(cl, launcher, kind, port, cap)
                    samples.setdefault((launcher, kind), []).append(s)
                    log(f"{what} {launcher:14s} {kind:6s} rep={rep}: " +
                        (f"{s:.2f} s" if s is not None else f"none in {cap:.0f} s"))
    finally:
        cl.close()
    table = []
    for (launcher, kind), s in samples.items():
        got = [x for x in s if x is not None]
        table.append({"launcher": launcher, "kind": kind, "reps": len(s), "recovered": len(got),
                      "seconds": statistics.median(got) if len(got) == len(s) else None,
                      "runs_seconds": s, "cap_seconds": cap})
    return table


def recovery_bench(reps, launchers=LAUNCHERS, kinds=KINDS, cap=CAP):
    """One row per launcher and kind: the median of `reps` runs, interleaved (A B C A B C ...)."""
    return interleaved("recovery", Cluster(), one_run, reps, launchers, kinds, 29700, cap)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--launchers", default=",".join(LAUNCHERS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    for r in recovery_bench(args.reps, args.launchers.split(","), args.kinds.split(",")):
        print(r)


if __name__ == "__main__":
    main()

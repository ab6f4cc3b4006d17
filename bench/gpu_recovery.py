"""NCCL recovery on a one-GPU box (issue 24's run 1, as far as one GPU allows): two nodes, one worker each,
both on GPU 0 and told apart by NCCL_HOSTID (NCCL takes them for two hosts and all-reduces over sockets, like
bench/gpu.py's onegpu step), `--nnodes 1:2 --max-restarts 3`, default settings, an NCCL all-reduce every
0.1 s (bench/recovery_worker.py with REC_BACKEND=nccl). Node 1 (not the store's host) crashes: its agent and
workers are SIGKILLed at once. Timed until node 0's worker all-reduces again in a world of 1; trun with both
elastic backends against torchrun 2.11, once each, a run with no recovery within CAP seconds counts as none.
The silent loss needs network namespaces, which the GPU box may not give: not run here.
Run on the GPU box: python3 bench/gpu_recovery.py (TRUN_BIN: the directory of trun; default build/portable;
GPU_REC_LAUNCHERS: which, e.g. trun-c10d,trun-trun-warm: -warm is trun with --warm-start).
Writes $OUT/<date>-gpu-recovery.json. GPU_REC_BACKEND=gloo tries the script on a CPU box.
"""
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from gpu_common import tree  # every descendant of a pid, from /proc
from recovery import firsts, wait_until  # bench/recovery.py: the same worker files and polling

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
WORKER = os.path.join(REPO, "bench", "recovery_worker.py")
OUT = os.environ.get("OUT", os.path.join(REPO, "build", "gpu-results"))
CAP = 100.0
SETUP = 180.0


def log(msg):
    print(msg, flush=True)


def cmd(launcher, port, run_id):
    ep = f"127.0.0.1:{port}"
    if launcher.startswith("trun-"):  # trun-<backend>[-warm]: -warm adds --warm-start (issue 31)
        return [os.path.join(BIN, "trun"), "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend",
                launcher[5:].split("-")[0], "--rdzv-endpoint", ep, "--rdzv-id", run_id, "--max-restarts", "3"] + \
            (["--warm-start"] if launcher.endswith("-warm") else []) + [WORKER]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", ep, "--rdzv_id", run_id, "--max_restarts", "3", WORKER]


def one_run(launcher, port, top):
    d = tempfile.mkdtemp(prefix=f"{launcher}.", dir=top)
    base = dict(os.environ, CUDA_VISIBLE_DEVICES="0", NCCL_NVLS_ENABLE="0", OMP_NUM_THREADS="1", LOGLEVEL="ERROR",
                REC_OUT=d, REC_BACKEND=os.environ.get("GPU_REC_BACKEND", "nccl"), PYTHON_EXEC=sys.executable)
    agents = []
    try:
        for n in range(2):
            env = dict(base, REC_NODE=f"node{n}", NCCL_HOSTID=f"trun-rec-node{n}")
            agents.append(subprocess.Popen(cmd(launcher, port, f"grec{port}"), env=env, start_new_session=True,
                                           stdout=open(os.path.join(d, f"agent{n}.out"), "w"),
                                           stderr=open(os.path.join(d, f"agent{n}.err"), "w")))
            if n == 0:
                time.sleep(1.0)  # node 0 hosts the rendezvous store
        if wait_until(lambda: True if all(any(w == 2 for w, _ in firsts(d, n)) for n in range(2)) else None,
                      SETUP) is None:
            raise RuntimeError(f"{launcher}: no world of 2 in {SETUP:.0f} s; node 0: "
                               + open(os.path.join(d, "agent0.err")).read()[-600:])
        # The world of 2 runs a while first (GPU_REC_STEADY seconds, default 8, every launcher alike): with
        # --warm-start the pool refilled after the group started must have imported torch before the loss.
        time.sleep(float(os.environ.get("GPU_REC_STEADY", "8")))
        pids = tree(agents[1].pid)
        t0 = time.time()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

        def resumed():
            t = min((t for w, t in firsts(d, 0) if w == 1 and t > t0), default=None)
            return None if t is None else t - t0

        s = wait_until(resumed, CAP)
        log(f"gpu recovery {launcher:14s} crash: " + (f"{s:.2f} s" if s is not None else f"none in {CAP:.0f} s"))
        return s
    finally:
        for a in agents:
            for p in tree(a.pid):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            a.wait()
        os.makedirs(os.path.join(OUT, "gpu-recovery-logs"), exist_ok=True)
        for f in os.listdir(d):
            if f.endswith(".err"):
                with open(os.path.join(d, f)) as src, \
                        open(os.path.join(OUT, "gpu-recovery-logs", f"{launcher}-{f}"), "w") as dst:
                    dst.write(src.read()[-20000:])


def main():
    import torch
    os.makedirs(OUT, exist_ok=True)
    top = tempfile.mkdtemp(prefix="trun-gpu-recovery.")
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "cap_seconds": CAP,
           "kind": "crash", "layout": "2 nodes on GPU 0, NCCL_HOSTID apart (NCCL over sockets)", "runs": []}
    port = 29800
    launchers = os.environ.get("GPU_REC_LAUNCHERS", "trun-c10d,trun-trun,torchrun-2.11").split(",")
    for launcher in launchers:
        port += 1
        try:
            s = one_run(launcher, port, top)
            res["runs"].append({"launcher": launcher, "seconds": s})
        except Exception as e:  # noqa: BLE001
            log(f"gpu recovery {launcher}: failed: {e}")
            res["runs"].append({"launcher": launcher, "seconds": None, "error": str(e)[-600:]})
    path = os.path.join(OUT, datetime.date.today().isoformat() + "-gpu-recovery.json")
    json.dump(res, open(path, "w"), indent=1)
    log(f"results: {path}")


if __name__ == "__main__":
    main()

"""What NCCL communicator set-up costs a replacement worker, and how much of it a process could do before it
becomes the worker (issue 39, item 1): N ranks (GPU_PW_RANKS, 2) on one GPU, NCCL_HOSTID apart (sockets, as
between nodes) or on N GPUs (GPU_PW_SPREAD=1), each rank a fresh python that imports torch and makes the
GPU's primary context through the driver (as a --warm-start-cuda pool process does), then, in the
"nccl" variant, makes and destroys a one-rank communicator in a helper thread (its own CUDA runtime
device; the main thread's is untouched); the "runtime" variant's thread only sets its device (the CUDA
runtime's start, which the nccl variant also gets, measured alone). The clock starts once every rank is there (a file
barrier) and stops at the first all-reduce's end: init_process_group + set_device + all_reduce. NCCL's own
"Init timings" line (NCCL_DEBUG=INFO, SUBSYS INIT) of each rank is kept. Variants alternate, GPU_PW_REPS
(3) each.

GPU_PW_VARIANTS (cold,runtime,nccl) picks them; a suffix sets NCCL variables for
the variant: +cumem0 / +cumem1 (NCCL_CUMEM_ENABLE), +rc0 (NCCL_RUNTIME_CONNECT=0: connections at init). The
clocks of each rank: pg (init_process_group returned; its communicator is made lazily, at the first
collective), ready (the first all-reduce ended), again (a second one ended). GPU_PW_TRACE=1 adds one more run
of each variant whose ranks log NCCL's INIT, P2P, ALLOC, BOOTSTRAP, PROXY and NET lines with microsecond
timestamps (UTC), next to the ranks' own wall clocks, into the result folder.

Run on the GPU box:  python3 bench/gpu_nccl_prewarm.py     Writes $OUT/<date>-nccl-prewarm/prewarm.json.
"""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

gc.nvls_off()
RANKS = int(os.environ.get("GPU_PW_RANKS", "2"))
SPREAD = os.environ.get("GPU_PW_SPREAD") == "1"
REPS = int(os.environ.get("GPU_PW_REPS", "3"))
VARIANTS = (os.environ.get("GPU_PW_VARIANTS") or "cold,runtime,nccl").split(",")
TRACE = os.environ.get("GPU_PW_TRACE") == "1"
KINDS = {"cold": 0, "runtime": 1, "nccl": 2}
SUFFIX = {"cumem0": ("NCCL_CUMEM_ENABLE", "0"), "cumem1": ("NCCL_CUMEM_ENABLE", "1"),
          "rc0": ("NCCL_RUNTIME_CONNECT", "0")}

RANK_CODE = r'''
import ctypes, json, os, sys, threading, time
rank, world, port, barrier, prewarm, dev = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
                                            int(sys.argv[5]), int(sys.argv[6]))
import torch
import torch.distributed as dist
C = ctypes
drv = C.CDLL("libcuda.so.1")
ctx, d = C.c_void_p(), C.c_int(0)
assert drv.cuInit(0) == 0 and drv.cuDeviceGet(C.byref(d), dev) == 0
assert drv.cuDevicePrimaryCtxRetain(C.byref(ctx), d) == 0
def loaded(part):
    with open("/proc/self/maps") as f:
        for line in f:
            if part in line:
                return line.split()[-1]
    return None
pw = {"s": 0.0, "rc": None}
if prewarm:
    def warm():
        t = time.monotonic()
        nccl, rt = C.CDLL(loaded("libnccl")), C.CDLL(loaded("libcudart"))
        rc = rt.cudaSetDevice(dev)
        comm, dv = C.c_void_p(), C.c_int(dev)
        if rc == 0 and prewarm == 1:
            rc = 100
        elif rc == 0:
            rc = 100 + nccl.ncclCommInitAll(C.byref(comm), 1, C.byref(dv))
        if rc == 100:
            rc = 200 + nccl.ncclCommDestroy(comm)
        pw["rc"], pw["s"] = rc, time.monotonic() - t
    th = threading.Thread(target=warm)
    th.start()
    th.join()
open(f"{barrier}.{rank}", "w").close()
while sum(os.path.exists(f"{barrier}.{r}") for r in range(world)) < world:
    time.sleep(0.001)
t0, w0 = time.monotonic(), time.time()
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
t_pg = time.monotonic()
torch.cuda.set_device(dev)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
t1 = time.monotonic()
dist.all_reduce(x)
torch.cuda.synchronize()
t2 = time.monotonic()
ok = float(x[0]) == world * world
dist.destroy_process_group()
print(json.dumps({"rank": rank, "ready_s": t1 - t0, "pg_s": t_pg - t0, "again_s": t2 - t1, "wall0": w0, "ok": ok,
                  "prewarm_s": pw["s"], "prewarm_rc": pw["rc"],
                  "nccl": torch.cuda.nccl.version()}), flush=True)
'''

TIMINGS = re.compile(r"Init timings - \S+: rank (\d+) nranks \d+ total ([\d.]+) \(([^)]*)\)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(variant, tmp, trace_dir=None):
    kind, *extra = variant.split("+")
    prewarm = KINDS[kind]
    port, barrier = free_port(), os.path.join(tmp, f"b{time.monotonic_ns()}")
    procs = []
    for r in range(RANKS):
        env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT")
        env.update(SUFFIX[x] for x in extra)
        if trace_dir:
            env.update(NCCL_DEBUG_SUBSYS="INIT,P2P,ALLOC,BOOTSTRAP,PROXY,NET", NCCL_DEBUG_TIMESTAMP_LEVELS="ALL",
                       NCCL_DEBUG_TIMESTAMP_FORMAT="[%T.%6f] ", TZ="UTC")
        if not SPREAD:
            env["NCCL_HOSTID"] = f"trun-pw-{r}"
        dev = r if SPREAD else 0
        # output into files, not pipes: a rank blocked on a full pipe would stall its peers' collectives
        outs = [open(f"{barrier}.r{r}.{x}", "w+") for x in ("out", "err")]
        procs.append((subprocess.Popen([sys.executable, "-c", RANK_CODE, str(r), str(RANKS), str(port), barrier,
                                        str(prewarm), str(dev)], env=env, stdout=outs[0], stderr=outs[1]), outs))
    ranks = []
    for p, outs in procs:
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            p.wait()
        out, err = (f.seek(0) or f.read() for f in outs)
        for f in outs:
            f.close()
        row = {"rc": p.returncode}
        if trace_dir:
            with open(os.path.join(trace_dir, f"{variant}-rank{len(ranks)}.log"), "w") as f:
                f.write(out + err)
        for line in out.splitlines():
            if line.startswith("{"):
                row.update(json.loads(line))
        m = [t for t in TIMINGS.findall(out + err)]  # NCCL writes its lines to stdout
        row["init_timings"] = [{"total": float(t[1]), "parts": t[2]} for t in m]
        if p.returncode != 0:
            row["stderr_tail"] = err[-2000:]
        ranks.append(row)
    return {"variant": variant, "prewarm": prewarm, "trace": bool(trace_dir), "ranks": ranks,
            "ready_s": max((r.get("ready_s", float("nan")) for r in ranks), default=None)}


def main():
    out_dir = os.path.join(os.environ.get("OUT", "build/gpu-results"), time.strftime("%Y-%m-%d") + f"-nccl-prewarm-{RANKS}{'x' if SPREAD else 's'}")
    os.makedirs(out_dir, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(REPS + (1 if TRACE else 0)):
            for v in VARIANTS:
                r = one(v, tmp, out_dir if i == REPS else None)
                runs.append(r)
                print(f"{v}{' (traced)' if r['trace'] else ''} ready {r['ready_s']:.3f} s  "
                      + "; ".join(f"r{x['rank'] if 'rank' in x else '?'} pg {x.get('pg_s', 0):.3f} again "
                                  f"{x.get('again_s', 0):.4f} {x.get('init_timings')}"
                                  + (f" pw {x.get('prewarm_s', 0):.3f}s rc {x.get('prewarm_rc')}" if r["prewarm"]
                                     else "")
                                  + (f" FAILED rc {x['rc']}: {x.get('stderr_tail', '')[-600:]}" if x['rc'] else "")
                                  for x in r["ranks"]), flush=True)
    summary = {}
    for v in VARIANTS:
        t = [r["ready_s"] for r in runs if r["variant"] == v and not r["trace"] and all(x["rc"] == 0 for x in r["ranks"])]
        summary[v] = {"median_s": statistics.median(t) if t else None, "all": t}
    print(json.dumps(summary), flush=True)
    with open(os.path.join(out_dir, "prewarm.json"), "w") as f:
        json.dump({"ranks": RANKS, "spread": SPREAD, "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()

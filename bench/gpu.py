"""Everything that needs the GPU box (torch 2.11, NCCL, GPUs), in one run sized for one device call.

Run by bench/gpu.sh. Writes $OUT/gpu-results.json (+ logs) and prints a summary. Steps:
  1. torch 2.11 interop: tests/store/ops.py against torch 2.11's libuv server and against trun-store (diff),
     waiters woken across clients, 40 concurrent adders.
  2. TCPStore: trun-store vs torch 2.11's libuv server under trun-store bench, 1/64/1024 clients, interleaved.
  3. Launch overhead: trun vs torchrun 2.11, --standalone, 2 no-op workers (/bin/true), interleaved.
  4. Worker environment: trun vs torchrun 2.11 (tests/agent/envdiff.py).
  5. NCCL all-reduce busbw through trun and through torchrun, one process per GPU (examples/allreduce_nccl.py).
  6. Hang detection: a hung NCCL all-reduce (bench/stall_nccl.py) under trun --stall-timeout 15: which rank is
     flagged, after how long, whether attempt 1 succeeds; the event stream and /proc CPU of the waiting ranks.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench import run_launcher  # same sampling as make bench

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT") or os.path.join(REPO, "build", "gpu-results")
BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
PY = sys.executable
REPS = int(os.environ.get("GPU_BENCH_REPS", "3"))
res = {"steps": {}}


def log(msg):
    print(msg, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def start_server(kind):
    if kind == "trun":
        p = subprocess.Popen([os.path.join(BIN, "trun-store"), "serve", "--port", "0"], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        port = int(p.stdout.readline().strip().rsplit(":", 1)[1])
    else:
        env = dict(os.environ, TRUN_OPS_USE_LIBUV="1")
        p = subprocess.Popen([PY, os.path.join(REPO, "tests", "store", "ops.py"), "serve"], stdout=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
        port = int(p.stdout.readline().split()[1])
    return p, port


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def interop():
    env = dict(os.environ, TRUN_OPS_USE_LIBUV="1")
    outs = {}
    for kind in ("torch-2.11-libuv", "trun"):
        p, port = start_server(kind)
        try:
            r = sh([PY, os.path.join(REPO, "tests", "store", "ops.py"), "ops", "127.0.0.1", str(port)], env=env,
                   timeout=300)
            outs[kind] = r.stdout
            open(os.path.join(OUT, f"ops-{kind}.txt"), "w").write(r.stdout + r.stderr)
            extra = {}
            for name, args in (("wake", ["wake"]), ("adds", ["adds", "40", "50"])):
                e = sh([PY, os.path.join(REPO, "tests", "store", "ops.py")] + args[:1] + ["127.0.0.1", str(port)]
                       + args[1:], env=env, timeout=300)
                extra[name] = e.returncode
            res["steps"].setdefault("interop", {})[kind] = {"ops_rc": r.returncode, **extra}
        finally:
            stop(p)
    same = outs.get("torch-2.11-libuv") == outs.get("trun")
    res["steps"]["interop"]["ops_identical"] = same
    if not same:
        import difflib
        d = "".join(difflib.unified_diff(outs["torch-2.11-libuv"].splitlines(True), outs["trun"].splitlines(True),
                                         "torch-2.11-libuv", "trun"))
        open(os.path.join(OUT, "ops-diff.txt"), "w").write(d)
    log(f"interop: torch 2.11 ops identical on both servers: {same}; {res['steps']['interop']}")


def store_bench():
    rows = {}
    req = {1: 20000, 64: 100000, 1024: 200000}
    for c in (1, 64, 1024):
        for rep in range(REPS):
            for kind in ("trun", "torch-2.11-libuv"):
                p, port = start_server(kind)
                try:
                    # 8 load-generator loops on the box's 32 cores: the servers, not the generator, set the pace.
                    r = sh([os.path.join(BIN, "trun-store"), "bench", "--target", f"127.0.0.1:{port}", "--clients",
                            str(c), "--requests", str(req[c]), "--threads", str(min(8, c))], timeout=300)
                finally:
                    stop(p)
                if r.returncode == 0:
                    rows.setdefault((kind, c), []).append(json.loads(r.stdout.strip().splitlines()[-1]))
                else:
                    log(f"store bench {kind} c={c}: {r.stderr[-300:]}")
    table = []
    for (kind, c), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        table.append({"server": kind, "clients": c, "ops_per_sec": statistics.median(x["ops_per_sec"] for x in rs),
                      "p50_us": statistics.median(x["p50_us"] for x in rs),
                      "p99_us": statistics.median(x["p99_us"] for x in rs),
                      "p999_us": statistics.median(x["p999_us"] for x in rs), "reps": len(rs)})
        log(f"store {kind:18s} clients={c:5d}: {table[-1]['ops_per_sec']:.0f} ops/s p99 {table[-1]['p99_us']:.0f} us")
    res["steps"]["store"] = table


def launch():
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR")
    table = []
    for nproc in (2, 8):
        common = ["--standalone", "--nproc_per_node", str(nproc), "--monitor_interval", "0.1", "--no_python",
                  "/bin/true"]
        cmds = {"trun": [os.path.join(BIN, "trun")] + common,
                "torchrun-2.11": [PY, "-m", "torch.distributed.run"] + common}
        samples = {}
        for rep in range(max(REPS, 5)):
            for name, cmd in cmds.items():
                rc, wall, peak, err = run_launcher(cmd, env)
                if rc != 0:
                    log(f"launch {name}: exit {rc}: {err[-300:]}")
                    continue
                samples.setdefault(name, []).append((wall, peak))
        for name, s in samples.items():
            table.append({"launcher": name, "nproc": nproc, "wall_ms": statistics.median(w for w, _ in s) * 1000,
                          "peak_rss_mib": statistics.median(p for _, p in s) / 1024, "reps": len(s)})
            log(f"launch {name:14s} nproc={nproc}: {table[-1]['wall_ms']:.1f} ms, "
                f"peak RSS {table[-1]['peak_rss_mib']:.1f} MiB")
    res["steps"]["launch"] = table


def envcmp():
    tmp = tempfile.mkdtemp(prefix="trun-gpu-env.")
    env = dict(os.environ, PYTHON_EXEC=PY, TMPDIR=tmp)
    dump = os.path.join(REPO, "tests", "agent", "dumpenv.py")
    for name, base in (("t", [PY, "-m", "torch.distributed.run"]), ("r", [os.path.join(BIN, "trun")])):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        r = sh(base + ["--standalone", "--nproc_per_node", "2", "--local-addr", "localhost", dump, d], env=env,
               timeout=300)
        if r.returncode != 0:
            log(f"env {name}: exit {r.returncode}: {r.stderr[-500:]}")
    r = sh([PY, os.path.join(REPO, "tests", "agent", "envdiff.py"), "torch-2.11", os.path.join(tmp, "t"),
            os.path.join(tmp, "r"), "2"], timeout=60)
    open(os.path.join(OUT, "envdiff.txt"), "w").write(r.stdout + r.stderr)
    res["steps"]["env"] = {"identical": r.returncode == 0, "report": r.stdout.strip().splitlines()[-12:]}
    log(f"env vs torchrun 2.11: identical={r.returncode == 0}")
    shutil.rmtree(tmp, ignore_errors=True)


def nccl():
    try:
        import torch
        n = torch.cuda.device_count()
    except Exception as e:  # noqa: BLE001
        log(f"nccl: no torch/cuda: {e}")
        return
    if n < 1:
        log("nccl: no GPU")
        return
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1")
    script = os.path.join(REPO, "examples", "allreduce_nccl.py")
    out = {}
    for name, base in (("trun", [os.path.join(BIN, "trun")]), ("torchrun-2.11", [PY, "-m", "torch.distributed.run"])):
        r = sh(base + ["--standalone", "--nproc_per_node", str(n), script, "--sizes", "1M,64M,1G"], env=env,
               timeout=300)
        open(os.path.join(OUT, f"nccl-{name}.log"), "w").write(r.stdout + r.stderr)
        out[name] = {"rc": r.returncode, "lines": [ln for ln in r.stdout.splitlines() if ln.startswith("AR ")]}
        log(f"nccl {name}: rc={r.returncode} " + " | ".join(out[name]["lines"]))
    res["steps"]["nccl"] = {"gpus": n, **out}


def stall():
    try:
        import torch
        n = torch.cuda.device_count()
    except Exception as e:  # noqa: BLE001
        log(f"stall: no torch/cuda: {e}")
        return
    if n < 2:
        log("stall: needs 2 GPUs")
        return
    n = min(n, 4)
    tmp = tempfile.mkdtemp(prefix="trun-gpu-stall.")
    ev = os.path.join(OUT, "stall-events.jsonl")
    if os.path.exists(ev):
        os.unlink(ev)
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1", TMPDIR=tmp)
    t0 = time.time()
    r = sh([os.path.join(BIN, "trun"), "--standalone", "--nproc_per_node", str(n), "--max-restarts", "1",
            "--stall-timeout", "15", "--events", ev, "--metrics-port", "0",
            os.path.join(REPO, "bench", "stall_nccl.py"), tmp], env=env, timeout=300)
    open(os.path.join(OUT, "stall.log"), "w").write(r.stdout + r.stderr)
    evs = [json.loads(ln) for ln in open(ev)] if os.path.exists(ev) else []
    stalls = [e for e in evs if e["event"] == "stall"]
    cpu = {}
    for f in os.listdir(tmp):
        if f.startswith("cpu."):
            cpu[f] = open(os.path.join(tmp, f)).read().split()
    res["steps"]["stall"] = {"gpus": n, "rc": r.returncode, "wall_s": time.time() - t0, "stalls": stalls,
                             "restarts": [e for e in evs if e["event"] == "restart"],
                             "waiting_ranks_cpu_s_wall_s": cpu}
    log(f"stall: rc={r.returncode}, flagged {[(e['rank'], round(e['idle_s'], 1)) for e in stalls]}, cpu {cpu}")
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    import torch
    res["torch"] = torch.__version__
    res["gpus"] = torch.cuda.device_count()
    res["gpu_name"] = torch.cuda.get_device_name(0) if res["gpus"] else None
    log(f"torch {res['torch']}, {res['gpus']} GPU(s) {res['gpu_name']}")
    steps = (interop, envcmp, launch, nccl, store_bench, stall)
    only = os.environ.get("GPU_STEPS")  # e.g. GPU_STEPS=interop,nccl
    if only:
        steps = [s for s in steps if s.__name__ in only.split(",")]
    for step in steps:
        t0 = time.time()
        try:
            step()
        except Exception as e:  # noqa: BLE001
            log(f"{step.__name__}: failed: {e!r}")
            res["steps"].setdefault("errors", []).append(f"{step.__name__}: {e!r}")
        log(f"[{step.__name__} took {time.time() - t0:.0f} s]")
        json.dump(res, open(os.path.join(OUT, "gpu-results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

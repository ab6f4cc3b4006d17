"""Everything that needs the GPU box (torch 2.11, NCCL, GPUs): every step at the box's GPU count N.

Run by bench/gpu.sh (every step: one device call of < 9 min on 2 GPUs; on 4 or more, split it with GPU_STEPS)
and bench/gpu4.sh (issue 39's steps, one a run: a run adds its steps to the JSON an earlier run of the same day
left in $OUT). Writes $OUT/<date>-<gpu>.json (e.g. 2026-11-22-h200x2.json; <gpu> from nvidia-smi's names, -s2,
-s3 ... added while bench/results holds that name already) and the logs in $OUT/<date>-<gpu>/, so that both can
be copied into bench/results/ and committed as they are; prints a summary. Steps:
  1. torch 2.11 interop: tests/store/ops.py against torch 2.11's libuv server and against trun-store (diff),
     waiters woken across clients, 40 concurrent adders.
  2. TCPStore: trun-store vs torch 2.11's libuv server under trun-store bench, 1/64/1024 clients, interleaved.
  3. Launch overhead: trun vs torchrun 2.11, --standalone, 2, N (the box's GPUs) and 8 no-op workers
     (/bin/true), interleaved.
  4. Worker environment: trun vs torchrun 2.11 (tests/helpers/envdiff.py), N workers.
  5. NCCL all-reduce busbw through trun and through torchrun, one process per GPU (examples/allreduce_nccl.py).
  6. preflight: trun-preflight (libcudart / libnccl from torch's nvidia packages, by dlopen) on every GPU via
     `trun-topo preflight`, 8 B..1 GiB, vs torch 2.11's all-reduce at the same sizes (examples/allreduce_nccl.py
     under trun; in a CUDA graph, and eagerly unless GPU_PREFLIGHT_EAGER=0).
     layouts: the box's N GPUs as one pod (1xN), two pods (2xN/2) and N pods (Nx1), pods apart by NCCL_HOSTID,
     each through trun --nccl-report with its busbw at 1 MiB, 64 MiB, 1 GiB: the doctor's split warning, each
     run's NCCL transport report, trun-topo --nccl-log over the 2-pod logs, and trun --preflight in the 2-pod
     layout (on 2 GPUs: the one-pod vs two-pods experiment of earlier results, under those names too).
  7. c10d: a mixed fleet with torchrun 2.11: one torchrun agent and one trun agent (N/2 GPUs each) join one c10d
     rendezvous, each kind serving the store in turn, and run an NCCL all-reduce; then two trun agents with the
     trun backend.
  8. ddp: examples/train_ddp.py on the N GPUs (GPU_DDP_NPROC: another count, e.g. 2 as in earlier results)
     under trun and under torchrun 2.11, interleaved (GPU_DDP_REPS pairs, 3): loss curves and step times.
     fsdp: examples/train_fsdp.py the same way, next to ddp.
  9. stall: hang detection: a hung NCCL all-reduce (bench/stall_nccl.py) under trun --stall-timeout 15: which rank is
     flagged, after how long, whether attempt 1 succeeds; the event stream and /proc CPU of the waiting ranks.
 11. health: the node health gate on real GPUs (issue 20): `trun-topo health --json` 5 times (its checks, each
     one's status, the gate's elapsed_ms), its nvlink check next to `nvidia-smi nvlink -s` for all GPUs and
     for the 2-GPU view (CUDA_VISIBLE_DEVICES=0,1), and trun --health-check fail --standalone with one no-op
     worker, 5 times (the gate's cost inside a launch, vs the same launch with --health-check off).
 10. onegpu (only when named, GPU_STEPS=onegpu, a call of its own: ~8 min): two pods on GPU 0 (NCCL_HOSTID
     apart, NCCL over sockets): preflight vs torch's all-reduce in that layout, and the DDP example under trun
     vs torchrun 2.11: what a 1-GPU box can show of the 2-GPU comparisons of steps 6 and 8.
 12. hang (only when named, GPU_STEPS=hang, a call of its own: up to 10 min; 2 or more GPUs, one rank per GPU):
     bench/gpu_hang.py: the last rank hangs (sleep, mismatch, spin), time to named and to training again, trun
     (NCCL RAS, --hang-timeout 10) vs torchrun 2.11 (torch's watchdog); HANG_LAUNCHERS=trun / torchrun split
     it into two calls that each fit a device call; the runs' logs in hang-logs.txt.
"""
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench import run_launcher  # same sampling as make bench
from gpu_common import ar_lines, free_port, gpu_names, gpu_tag, torchrun_cmd  # noqa: F401 (gpu_topo.py imports
# gpu_names and gpu_tag from here)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT") or os.path.join(REPO, "build", "gpu-results")
BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
PY = sys.executable
REPS = int(os.environ.get("GPU_BENCH_REPS", "3"))


def nranks():
    """The ranks a step runs: one per GPU; on a box without GPUs, GPU_BENCH_CPU (a count of CPU workers, gloo)
    where a step can try its code path that way (layouts, ddp, fsdp), else 0."""
    return gpu_count() or int(os.environ.get("GPU_BENCH_CPU") or 0)


def gpu_count():
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch or no CUDA: no GPU
        return 0


def result_name(names, day):
    """<day>-<gpu tag>, with -s2, -s3 ... while bench/results/ already holds that name."""
    base = f"{day}-{gpu_tag(names)}"
    name, i = base, 2
    while os.path.exists(os.path.join(REPO, "bench", "results", name + ".json")):
        name, i = f"{base}-s{i}", i + 1
    return name


GPU_NAMES = gpu_names()
# GPU_RESULT_SUFFIX (bench/gpu4.sh): <date>-<gpu>-<suffix>, one name per device call, so that two calls' results
# never share a name
NAME = (f"{datetime.datetime.now(datetime.timezone.utc).date().isoformat()}-{gpu_tag(GPU_NAMES)}-"
        f"{os.environ['GPU_RESULT_SUFFIX']}" if os.environ.get("GPU_RESULT_SUFFIX") else
        result_name(GPU_NAMES, datetime.datetime.now(datetime.timezone.utc).date().isoformat()))
LOGS = os.path.join(OUT, NAME)
RESULT = os.path.join(OUT, NAME + ".json")
res = {"steps": {}}


def log(msg):
    print(msg, flush=True)
    with open(os.path.join(LOGS, "run.log"), "a") as f:
        f.write(msg + "\n")


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def start_server(kind):
    """kind: "trun" (one loop), "trun-<N>t" (trun-store serve --threads N) or "torch-2.11-libuv"."""
    if kind.startswith("trun"):
        threads = kind[5:-1] if kind.endswith("t") else "1"
        p = subprocess.Popen([os.path.join(BIN, "trun-store"), "serve", "--port", "0", "--threads", threads],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
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
    for kind in ("torch-2.11-libuv", "trun", "trun-4t"):
        p, port = start_server(kind)
        try:
            r = sh([PY, os.path.join(REPO, "tests", "store", "ops.py"), "ops", "127.0.0.1", str(port)], env=env,
                   timeout=300)
            outs[kind] = r.stdout
            open(os.path.join(LOGS, f"ops-{kind}.txt"), "w").write(r.stdout + r.stderr)
            extra = {}
            for name, args in (("wake", ["wake"]), ("adds", ["adds", "40", "50"])):
                e = sh([PY, os.path.join(REPO, "tests", "store", "ops.py")] + args[:1] + ["127.0.0.1", str(port)]
                       + args[1:], env=env, timeout=300)
                extra[name] = e.returncode
            res["steps"].setdefault("interop", {})[kind] = {"ops_rc": r.returncode, **extra}
        finally:
            stop(p)
    same = outs.get("torch-2.11-libuv") == outs.get("trun") == outs.get("trun-4t")
    res["steps"]["interop"]["ops_identical"] = same
    if not same:
        import difflib
        for kind in ("trun", "trun-4t"):
            d = "".join(difflib.unified_diff(outs.get("torch-2.11-libuv", "").splitlines(True),
                                             outs.get(kind, "").splitlines(True), "torch-2.11-libuv", kind))
            open(os.path.join(LOGS, f"ops-diff-{kind}.txt"), "w").write(d)
    log(f"interop: torch 2.11 ops identical on both servers: {same}; {res['steps']['interop']}")


def store_bench():
    """trun-store with one loop and with 4 and 8 (--threads) vs torch 2.11's libuv server (one loop), interleaved,
    the same load generator with 8 loops (half the box's cores at most), so that the servers set the pace."""
    rows = {}
    req = {1: 20000, 64: 200000, 1024: 400000}
    gen_threads = max(1, min(8, (os.cpu_count() or 2) // 2))
    res["steps"]["store_load_threads"] = gen_threads
    for c in (1, 64, 1024):
        for rep in range(REPS):
            for kind in ("trun", "trun-4t", "trun-8t", "torch-2.11-libuv"):
                if c == 1 and kind in ("trun-4t", "trun-8t"):
                    continue  # one client is one connection: one loop serves it
                p, port = start_server(kind)
                try:
                    r = sh([os.path.join(BIN, "trun-store"), "bench", "--target", f"127.0.0.1:{port}", "--clients",
                            str(c), "--requests", str(req[c]), "--threads", str(min(gen_threads, c))], timeout=300)
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
    for nproc in sorted({2, max(2, gpu_count()), 8}):
        common = ["--standalone", "--nproc_per_node", str(nproc), "--monitor_interval", "0.1", "--no_python",
                  "/bin/true"]
        cmds = {"trun": [os.path.join(BIN, "trun")] + common,
                "torchrun-2.11": list(torchrun_cmd(PY)) + common}
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
    n = max(2, gpu_count())  # one worker per GPU, as a job on this box would have
    tmp = tempfile.mkdtemp(prefix="trun-gpu-env.")
    env = dict(os.environ, PYTHON_EXEC=PY, TMPDIR=tmp)
    dump = os.path.join(REPO, "tests", "agent", "dumpenv.py")
    for name, base in (("t", list(torchrun_cmd(PY))), ("r", [os.path.join(BIN, "trun")])):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        r = sh(base + ["--standalone", "--nproc_per_node", str(n), "--local-addr", "localhost", dump, d], env=env,
               timeout=300)
        if r.returncode != 0:
            log(f"env {name}: exit {r.returncode}: {r.stderr[-500:]}")
    # trun's own NCCL / EFA variables on a GPU node (source "trun" in --explain) are expected additions.
    ex = sh([os.path.join(BIN, "trun"), "--explain", "--nproc-per-node", str(n), dump], env=env, timeout=60)
    open(os.path.join(LOGS, "explain.txt"), "w").write(ex.stdout + ex.stderr)
    lines = ex.stdout.splitlines()
    decided = [f"trun:{m.group(1)}={m.group(2)}" for i, ln in enumerate(lines[:-1])
               if (m := re.match(r"^  ([A-Z][A-Z0-9_]*)=(.*)$", ln)) and lines[i + 1].strip().startswith("source: trun;")]
    r = sh([PY, os.path.join(REPO, "tests", "agent", "envdiff.py"), "torch-2.11", os.path.join(tmp, "t"),
            os.path.join(tmp, "r"), str(n)] + decided, timeout=60)
    open(os.path.join(LOGS, "envdiff.txt"), "w").write(r.stdout + r.stderr)
    res["steps"]["env"] = {"nproc": n, "identical": r.returncode == 0, "trun_decisions": decided,
                           "report": r.stdout.strip().splitlines()[-12:]}
    log(f"env vs torchrun 2.11: identical={r.returncode == 0}")
    shutil.rmtree(tmp, ignore_errors=True)


def nccl():
    try:
        import torch
        n = torch.cuda.device_count()
    except Exception as e:  # noqa: BLE001
        log(f"nccl: no torch/cuda: {e}")
        return
    if n < 2:
        log(f"nccl: {n} GPU(s): an all-reduce needs two")
        return
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1")
    script = os.path.join(REPO, "examples", "allreduce_nccl.py")
    out = {}
    for name, base in (("trun", [os.path.join(BIN, "trun")]), ("torchrun-2.11", list(torchrun_cmd(PY)))):
        r = sh(base + ["--standalone", "--nproc_per_node", str(n), script, "--sizes", "1M,64M,1G"], env=env,
               timeout=300)
        open(os.path.join(LOGS, f"nccl-{name}.log"), "w").write(r.stdout + r.stderr)
        out[name] = {"rc": r.returncode, "lines": [ln for ln in r.stdout.splitlines() if ln.startswith("AR ")]}
        log(f"nccl {name}: rc={r.returncode} " + " | ".join(out[name]["lines"]))
    res["steps"]["nccl"] = {"gpus": n, **out}


def torch_nccl_libs():
    """libcudart.so.* and libnccl.so.2 from torch's nvidia pip packages (the box has no system CUDA)."""
    import glob
    import torch
    roots = {os.path.dirname(os.path.dirname(torch.__file__)), os.path.join(sys.prefix, "lib")}
    found = {}
    for root in roots:
        for pat, key in (("**/libcudart.so*", "TRUN_CUDART_LIBRARY"), ("**/libnccl.so.2", "TRUN_NCCL_LIBRARY")):
            for f in sorted(glob.glob(os.path.join(root, pat), recursive=True)):
                found.setdefault(key, f)
    return found


def vs_torch(results, graph, eager):
    """trun-preflight's results against torch's all-reduce (ar_lines of the --graph and the eager run) at the
    same sizes. The ratio is preflight busbw / torch busbw, taken from the times (the same bytes and ranks on
    both sides), which keep their precision where busbw prints as 0.000 GB/s."""
    cmp = []
    for x in results:
        b = int(x["bytes"])
        t = graph.get(b)
        if t and t["time_us"] > 0 and x.get("time_us", 0) > 0:
            cmp.append({"bytes": b, "preflight_busbw": x["busbw"], "torch_busbw": t["busbw"],
                        "preflight_us": x["time_us"], "torch_us": t["time_us"],
                        "torch_eager_busbw": (eager.get(b) or {}).get("busbw"),
                        "ratio": t["time_us"] / x["time_us"]})
    return cmp


def preflight():
    import torch
    n = torch.cuda.device_count()
    if n == 0:
        log("preflight: no GPU: trun-topo preflight and torch's NCCL all-reduce need one")
        return
    libs = torch_nccl_libs()
    log(f"preflight: {n} GPU(s); libraries {libs}")
    out = {"gpus": n, "libs": libs}
    res["steps"]["preflight"] = out
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1", **libs)
    topo, trun = os.path.join(BIN, "trun-topo"), os.path.join(BIN, "trun")
    # 1. trun-preflight on every GPU, 8 B..1 GiB (x2), 5 warm-up + 20 timed iterations.
    pj = os.path.join(LOGS, "preflight.json")
    r = sh([topo, "preflight", "--json", pj], env=env, timeout=400)
    open(os.path.join(LOGS, "preflight.txt"), "w").write(r.stdout + r.stderr)
    out["preflight_rc"] = r.returncode
    log(r.stdout[-3000:] or r.stderr[-2000:])
    pre = json.load(open(pj)) if os.path.exists(pj) else {}
    out["preflight"] = pre
    if n < 2:
        return
    # 2. torch 2.11's all-reduce at the same sizes (same NCCL library), through trun.
    sizes = [x["bytes"] for x in pre.get("results", [])] or [8 << i for i in range(28)]
    script = os.path.join(REPO, "examples", "allreduce_nccl.py")
    # nccl-tests' loop from Python: the --iters all-reduces of each size in one CUDA graph (--graph), so that
    # torch's per-call Python cost does not count; the eager loop too, for reference.
    size_arg = ",".join(str(int(b)) for b in sizes)
    r = sh([trun, "--standalone", "--nproc-per-node", str(n), script, "--sizes", size_arg, "--graph"], env=env,
           timeout=400)
    open(os.path.join(LOGS, "preflight-torch.txt"), "w").write(r.stdout + r.stderr)
    tor = ar_lines(r.stdout)
    out["torch_mode"] = "graph" if "mode=graph" in r.stdout else "eager"
    eager = {}
    if os.environ.get("GPU_PREFLIGHT_EAGER", "1") != "0":  # the eager loop too, for reference
        r = sh([trun, "--standalone", "--nproc-per-node", str(n), script, "--sizes", size_arg], env=env, timeout=400)
        open(os.path.join(LOGS, "preflight-torch-eager.txt"), "w").write(r.stdout + r.stderr)
        eager = ar_lines(r.stdout)
    cmp = vs_torch(pre.get("results", []), tor, eager)
    big = [c for c in cmp if c["bytes"] >= 64 << 20]
    out["vs_torch"] = cmp
    out["within_5pct_at_64MiB_up"] = bool(big) and all(abs(c["ratio"] - 1) <= 0.05 for c in big)
    out["within_5pct_all_sizes"] = bool(cmp) and all(abs(c["ratio"] - 1) <= 0.05 for c in cmp)
    out["worst_ratio"] = max(cmp, key=lambda c: abs(c["ratio"] - 1)) if cmp else None
    for c in cmp:
        log(f"preflight vs torch {c['bytes']:>11d} B: {c['preflight_busbw']:9.3f} vs {c['torch_busbw']:9.3f} GB/s, "
            f"{c['preflight_us']:.1f} vs {c['torch_us']:.1f} us ({(c['ratio'] - 1) * 100:+.1f} %; torch eager "
            f"{c['torch_eager_busbw']})")
    log(f"preflight within 5 % of torch ({out['torch_mode']}) at >= 64 MiB: {out['within_5pct_at_64MiB_up']}, "
        f"at every size: {out['within_5pct_all_sizes']}; worst {out['worst_ratio']}")


def layout_run(env, k, per, tag, args, extra_env=None, timeout=300):
    """k agents of `per` GPUs each (agent i on GPUs i*per..), static rendezvous on 127.0.0.1; with k > 1 each
    agent has an NCCL_HOSTID of its own (NCCL takes them for k hosts: NET/Socket between them, one pod each).
    (return codes, [(stdout, stderr)] by agent); each agent's output in LOGS/<tag>-<i>.txt."""
    port = str(free_port())
    procs = []
    for rk in range(k):
        e = dict(env, CUDA_VISIBLE_DEVICES=",".join(str(rk * per + j) for j in range(per)), **(extra_env or {}))
        if k > 1:
            e["NCCL_HOSTID"] = f"pod-{rk}"
        procs.append(subprocess.Popen(
            [os.path.join(BIN, "trun"), "--nnodes", str(k), "--node-rank", str(rk), "--master-addr", "127.0.0.1",
             "--master-port", port, "--nproc-per-node", str(per)] + args, env=e, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            o, e = p.communicate()
            outs.append((o, e + f"\n[bench: killed after {timeout} s]"))
    for rk, (o, e) in enumerate(outs):
        open(os.path.join(LOGS, f"{tag}-{rk}.txt"), "w").write(o + e)
    return [p.returncode for p in procs], outs


def layouts():
    """The doctor and the NCCL transport report (--nccl-report) in each layout of the box's N GPUs: one pod of N
    (1xN), two pods of N/2 (2xN/2), four of N/4 where N > 4, N pods of one (Nx1), pods apart by NCCL_HOSTID,
    each with the busbw of examples/allreduce_nccl.py at 1 MiB, 64 MiB and 1 GiB; trun-topo --nccl-log over every pod's NCCL logs of
    the 2-pod layout; trun --preflight in the 2-pod layout. For N = 2 the 1x2 and 2x1 runs are the one-pod and
    two-pods experiment of earlier results (kept under those names too)."""
    import glob
    n = nranks()
    out = res["steps"]["layouts"] = {"gpus": gpu_count(), "ranks": n}
    if n < 2:
        log(f"layouts: {n} GPU(s): a layout of several needs two")
        return
    libs = torch_nccl_libs() if gpu_count() else {}
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1", **libs)
    # GPU_BENCH_CPU (no GPU): the same layouts with gloo workers, to try the step
    script = os.path.join(REPO, "examples", "allreduce_nccl.py" if gpu_count() else "allreduce.py")
    shapes = []
    for k in (1, 2, 4, n):  # on 8 GPUs: 1x8, 2x4, 4x2, 8x1
        if k <= n and n % k == 0 and (k, n // k) not in shapes:
            shapes.append((k, n // k))
    for k, per in shapes:
        name = f"{k}x{per}"
        rcs, outs = layout_run(env, k, per, f"layout-{name}",
                               ["--nccl-report", "--log-dir", os.path.join(LOGS, f"layout-{name}-logs"), script]
                               + (["--sizes", "1M,64M,1G"] if gpu_count() else []))
        o0, e0 = outs[0]
        row = {"agents": k, "gpus_per_agent": per, "rc": rcs,
               "ar": [ln for ln in o0.splitlines() if ln.startswith("AR ")],
               "busbw": {str(b): v["busbw"] for b, v in ar_lines(o0).items()},
               "doctor_split_warning": "WARNING [split]" in e0,
               "doctor": [ln.strip() for ln in e0.splitlines() if "WARNING [" in ln][:6],
               "report": [ln for ln in e0.splitlines() if "connection(s)" in ln or "verdict:" in ln]}
        if k == 2:
            files = sorted(glob.glob(os.path.join(LOGS, f"layout-{name}-logs", "*", "attempt_0", "*", "nccl.*.log")))
            r = sh([os.path.join(BIN, "trun-topo"), "--nccl-log"] + files + ["--json"], timeout=60) if files else None
            row["nccl_log_both"] = json.loads(r.stdout) if r is not None and r.returncode == 0 else None
        out[name] = row
        if n == 2:
            res["steps"].setdefault("preflight", {}).setdefault("experiment", {})[
                "one_pod" if k == 1 else "two_pods"] = row
        json.dump(res, open(RESULT, "w"), indent=1)
        bw = row["busbw"].get(str(1 << 30))
        log(f"layout {name}: exit {rcs}, 1 GiB busbw {bw} GB/s, doctor split warning {row['doctor_split_warning']}, "
            f"report {' | '.join(' '.join(x.split()) for x in row['report'][:2])}")
    # trun --preflight in the 2-pod layout: the table and verdict before the workers.
    k = 2
    rcs, outs = layout_run(dict(env, TRUN_PREFLIGHT_ARGS="--max-bytes 268435456"), k, n // k, "layout-preflight",
                           ["--preflight", "--no-python", "/bin/true"])
    out["two_pods_preflight"] = {"layout": f"{k}x{n // k}", "rc": rcs,
                                 "verdict": [ln for ln in outs[0][0].splitlines() if ln.startswith("# ")]}
    if n == 2:
        res["steps"].setdefault("preflight", {}).setdefault("experiment", {})["two_pods_preflight"] = \
            out["two_pods_preflight"]
    log(f"layout {k}x{n // k} trun --preflight: exit {rcs}, {out['two_pods_preflight']['verdict'][-1:]}")


def c10d():
    if gpu_count() < 2:
        log(f"c10d: {gpu_count()} GPU(s): two agents with one GPU each need two")
        return
    per = gpu_count() // 2  # two agents of N/2 GPUs each
    env0 = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1")
    script = os.path.join(REPO, "examples", "allreduce_nccl.py")
    out = {}

    for case, host in (("torchrun-hosts", "torchrun"), ("trun-hosts", "trun"), ("trun-backend", None)):
        p = free_port()
        procs = []
        kinds = ("trun", "trun") if host is None else (("torchrun", "trun") if host == "torchrun" else ("trun", "torchrun"))
        for i, kind in enumerate(kinds):
            env = dict(env0, CUDA_VISIBLE_DEVICES=",".join(str(i * per + j) for j in range(per)))
            be = "trun" if host is None else "c10d"
            conf = f"is_host={'1' if i == 0 else '0'}"
            base = [os.path.join(BIN, "trun")] if kind == "trun" else list(torchrun_cmd(PY))
            cmd = base + ["--nnodes", "2", "--nproc-per-node", str(per), "--rdzv-backend", be, "--rdzv-endpoint",
                          f"127.0.0.1:{p}", "--rdzv-id", case, "--rdzv-conf", conf, script, "--sizes", "1M,64M"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
            time.sleep(1.0 if i == 0 else 0)
        logs = []
        rcs = []
        for pr in procs:
            try:
                o, _ = pr.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                pr.kill()
                o, _ = pr.communicate()
            logs.append(o)
            rcs.append(pr.returncode)
        open(os.path.join(LOGS, f"c10d-{case}.log"), "w").write("\n=====\n".join(logs))
        ar = [ln for o in logs for ln in o.splitlines() if ln.startswith("AR ")]
        out[case] = {"agents": list(kinds), "gpus_per_agent": per, "rcs": rcs, "ar": ar}
        log(f"c10d {case}: agents {kinds} rc {rcs} {' | '.join(ar)}")
    res["steps"]["c10d"] = out


DDP_ARGS = ["--steps", "300", "--d-model", "512", "--layers", "4", "--heads", "8", "--seq", "128", "--batch", "16"]


def ddp_pairs(run, reps, tag, example="train_ddp.py"):
    """examples/train_ddp.py (or `example`: train_fsdp.py) under trun and under torchrun 2.11: a warm-up run
    first (CUDA / cuBLAS caches, page cache), not counted; then reps pairs, the order alternating so that neither launcher always runs first.
    run(launcher argv, script argv, log tag) -> (ok, rank 0's stdout). The per-run median step times, the
    median over runs, each launcher's spread ((max - min) / median: the noise floor against which the ratio is
    read), each pair's trun / torchrun ratio, and rank 0's loss curves compared."""
    script = os.path.join(REPO, "examples", example)
    run([os.path.join(BIN, "trun")], [script, "--steps", "30"], f"{tag}-warmup")
    rows, curves, pairs_out = {"trun": [], "torchrun-2.11": []}, {}, []
    pairs = (("trun", [os.path.join(BIN, "trun")]), ("torchrun-2.11", list(torchrun_cmd(PY))))
    for rep in range(reps):
        got = {}
        for name, base in (pairs if rep % 2 == 0 else pairs[::-1]):
            lossf = os.path.join(LOGS, f"{tag}-{name}-{rep}.json")
            ok, text = run(base, [script] + DDP_ARGS + ["--out", lossf], f"{tag}-{name}-{rep}")
            m = re.search(r"step time: mean ([0-9.]+) ms, median ([0-9.]+) ms", text)
            if ok and m:
                rows[name].append({"mean_ms": float(m.group(1)), "median_ms": float(m.group(2))})
                got[name] = float(m.group(2))
            try:  # rank 0's losses (the mean over ranks), from --out: console lines of two ranks may interleave
                curves.setdefault(name, json.load(open(lossf))["losses"])
            except (OSError, ValueError, KeyError):
                pass
            log(f"{tag} {name} rep {rep}: ok={ok} {m.group(0) if m else 'no step time'}")
        if len(got) == 2:
            pairs_out.append(got["trun"] / got["torchrun-2.11"])
    t, o = curves.get("trun", []), curves.get("torchrun-2.11", [])
    diff = max((abs(a - b) for a, b in zip(t, o)), default=None) if t and o and len(t) == len(o) else None
    med = {k: statistics.median(r["median_ms"] for r in v) if v else None for k, v in rows.items()}
    spread = {k: (max(r["median_ms"] for r in v) - min(r["median_ms"] for r in v)) / med[k] if v else None
              for k, v in rows.items()}
    ratio = med["trun"] / med["torchrun-2.11"] if med["trun"] and med["torchrun-2.11"] else None
    log(f"{tag}: median step ms {med} (trun / torchrun {ratio}; pairs {pairs_out}), spread {spread}, "
        f"max loss diff {diff}")
    return {"example": example, "args": DDP_ARGS, "runs": rows, "median_step_ms": med, "spread": spread,
            "trun_over_torchrun": ratio, "pair_ratios": pairs_out, "max_loss_diff": diff, "loss_first": t[:1], "loss_last": t[-1:]}


def ddp(example="train_ddp.py", key="ddp"):
    """The DDP example on the box's N GPUs (GPU_DDP_NPROC: another count, e.g. 2 for the 2-GPU figures of
    earlier results), trun vs torchrun 2.11, GPU_DDP_REPS pairs (3)."""
    n = int(os.environ.get("GPU_DDP_NPROC") or nranks())
    if nranks() < 2 or n > nranks():
        log(f"{key}: {gpu_count()} GPU(s): the comparison needs two or more ({n} asked)")
        return
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1")

    def run(base, extra, tag):
        r = sh(base + ["--standalone", "--nproc_per_node", str(n)] + extra, env=env, timeout=300)
        open(os.path.join(LOGS, f"{tag}.log"), "w").write(r.stdout + r.stderr)
        return r.returncode == 0, r.stdout

    res["steps"][key] = dict(ddp_pairs(run, int(os.environ.get("GPU_DDP_REPS", "3")), key, example), nproc=n)


def fsdp():
    """The FSDP example (examples/train_fsdp.py, the same model and arguments) as ddp() runs the DDP one: next
    to the ddp step's figures."""
    ddp("train_fsdp.py", "fsdp")
    f, d = res["steps"].get("fsdp"), res["steps"].get("ddp")
    if f and d:
        log(f"fsdp vs ddp, {f['nproc']} GPUs, median step ms under trun: {f['median_step_ms'].get('trun')} vs "
            f"{d['median_step_ms'].get('trun')}")


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
    ev = os.path.join(LOGS, "stall-events.jsonl")
    if os.path.exists(ev):
        os.unlink(ev)
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1", TMPDIR=tmp)
    t0 = time.time()
    r = sh([os.path.join(BIN, "trun"), "--standalone", "--nproc_per_node", str(n), "--max-restarts", "1",
            "--stall-timeout", "15", "--events", ev, "--metrics-port", "0",
            os.path.join(REPO, "bench", "stall_nccl.py"), tmp], env=env, timeout=300)
    open(os.path.join(LOGS, "stall.log"), "w").write(r.stdout + r.stderr)
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


def hang():
    if "hang" not in (os.environ.get("GPU_STEPS") or "").split(","):
        log("hang: runs only when named (up to 10 min): GPU_STEPS=hang bash bench/gpu.sh")
        return
    n = gpu_count()
    if n < 2:
        log(f"hang: {n} GPU(s): a collective hang needs 2 or more")
        return
    import gpu_hang

    out, lines = gpu_hang.measure()
    open(os.path.join(LOGS, "hang-logs.txt"), "w").write("\n".join(lines) + "\n")
    res["steps"]["hang"] = out
    for r in out["runs"]:
        log(f"hang: {r['launcher']} {r['kind']}: named {r['named_s']} s, restarted {r['restarted_s']} s, "
            f"culprit {r['trun_culprit'] or r['root_cause']}, exit {r['exit']}")


def two_pods_one_gpu(base, args, env, tag, timeout=400):
    """Two agents (base: trun or torchrun), one worker each, static rendezvous on 127.0.0.1, both on GPU 0 with
    different NCCL_HOSTID: NCCL takes them for two hosts and connects them over NET/Socket. (rcs, outputs)."""
    port = str(free_port())
    procs = []
    for rk in (0, 1):
        e = dict(env, CUDA_VISIBLE_DEVICES="0", NCCL_HOSTID=f"pod-{rk}")
        procs.append(subprocess.Popen(
            base + ["--nnodes", "2", "--node_rank", str(rk), "--master_addr", "127.0.0.1", "--master_port", port,
                    "--nproc_per_node", "1"] + args, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True))
    outs = []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            o, _ = p.communicate()
        outs.append(o)
    open(os.path.join(LOGS, f"{tag}.log"), "w").write("\n===== agent 1\n".join(outs))
    return [p.returncode for p in procs], outs


def onegpu():
    """What a 1-GPU box can show of issues 6 and 7: two pods on the one GPU (two agents, NCCL_HOSTID apart), so
    that NCCL runs a real 2-rank all-reduce (over NET/Socket). Preflight against torch 2.11's all-reduce in that
    same layout at the same sizes (CUDA graph and eager), and the DDP example under trun and under torchrun 2.11
    (warm-up, then 5 alternating pairs). A proxy, labelled so: the issues' numbers are for 2 GPUs."""
    n = gpu_count()
    if n < 1 or "onegpu" not in (os.environ.get("GPU_STEPS") or "").split(","):
        log(f"onegpu: {n} GPU(s): the 1-GPU proxy (~8 min) runs only when named: GPU_STEPS=onegpu bash bench/gpu.sh")
        return
    libs = torch_nccl_libs()
    env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1", **libs)
    trun = [os.path.join(BIN, "trun")]
    out = {"layout": "2 agents x 1 worker on GPU 0, NCCL_HOSTID pod-0 / pod-1 (NCCL over NET/Socket)"}
    res["steps"]["onegpu"] = out
    # 1. trun-preflight as the workers (rank 0 writes the JSON), then torch's all-reduce at the same sizes.
    pj = os.path.join(LOGS, "onegpu-preflight.json")
    rcs, outs = two_pods_one_gpu(trun, ["--no-python", os.path.join(BIN, "trun-preflight"), "--json", pj], env,
                                 "onegpu-preflight")
    pre = json.load(open(pj)) if os.path.exists(pj) else {}
    out["preflight_rc"], out["preflight"] = rcs, pre
    log(f"onegpu preflight: rc {rcs}, verdict {pre.get('verdict')}, fabric {pre.get('fabric')}")
    sizes = [int(x["bytes"]) for x in pre.get("results", [])]
    script = os.path.join(REPO, "examples", "allreduce_nccl.py")
    tor = {}
    for mode, extra in (("graph", ["--graph"]), ("eager", [])):
        rcs, outs = two_pods_one_gpu(trun, [script, "--sizes", ",".join(map(str, sizes))] + extra, env,
                                     f"onegpu-torch-{mode}")
        tor[mode] = ar_lines(outs[0])
        out[f"torch_{mode}_rc"] = rcs
        if mode == "graph":
            out["torch_mode"] = "graph" if "mode=graph" in outs[0] else "eager"
    cmp = vs_torch(pre.get("results", []), tor["graph"], tor["eager"])
    out["vs_torch"] = cmp
    out["within_5pct_all_sizes"] = bool(cmp) and all(abs(c["ratio"] - 1) <= 0.05 for c in cmp)
    for c in cmp:
        log(f"onegpu preflight vs torch {c['bytes']:>11d} B: {c['preflight_busbw']:8.3f} vs {c['torch_busbw']:8.3f}"
            f" GB/s, {c['preflight_us']:.1f} vs {c['torch_us']:.1f} us ({(c['ratio'] - 1) * 100:+.1f} %; torch eager "
            f"{c['torch_eager_busbw']})")
    # 2. DDP: the same model and pairing as ddp(), both launchers in the same two-pods layout, 5 pairs.
    def run(base, extra, tag):
        rcs, outs = two_pods_one_gpu(base, extra, env, tag)
        return rcs == [0, 0], outs[0]

    out["ddp"] = ddp_pairs(run, 5, "onegpu-ddp")


def health():
    out = res["steps"]["health"] = {}
    topo = os.path.join(BIN, "trun-topo")
    runs = []
    for i in range(5):
        t0 = time.time()
        r = sh([topo, "health", "--json"], timeout=120)
        wall = (time.time() - t0) * 1000
        open(os.path.join(LOGS, f"health-{i}.json"), "w").write(r.stdout + r.stderr)
        try:
            h = json.loads(r.stdout)
        except ValueError:
            raise RuntimeError(f"trun-topo health --json exited {r.returncode}: {r.stderr[-400:]}")
        runs.append({"exit": r.returncode, "status": h["status"], "elapsed_ms": h["elapsed_ms"], "wall_ms": wall})
        if i == 0:
            out["checks"] = [{k: c.get(k) for k in ("name", "status", "value", "reason")} for c in h["checks"]]
            out["gpus"], out["gpu_source"], out["instance_type"] = h["gpus"], h["gpu_source"], h["instance_type"]
    out["runs"] = runs
    out["elapsed_ms_median"] = statistics.median(r["elapsed_ms"] for r in runs)
    out["wall_ms_median"] = statistics.median(r["wall_ms"] for r in runs)
    log(f"health: {out['gpus']} GPU(s) via {out['gpu_source']}: status {runs[0]['status']}, gate "
        f"{out['elapsed_ms_median']:.1f} ms (median of 5; trun-topo's wall {out['wall_ms_median']:.1f} ms); "
        + ", ".join(f"{c['name']}={c['status']}" for c in out["checks"]))
    try:
        out["nvlink_views"] = nvlink_views()
    except Exception as e:  # noqa: BLE001
        log(f"health: nvlink views failed: {e!r}")
    json.dump(res, open(RESULT, "w"), indent=1)
    # The gate inside a launch: trun --health-check fail vs off, one no-op worker, interleaved.
    launch = {"fail": [], "off": []}
    for i in range(5):
        for mode in ("fail", "off"):
            t0 = time.time()
            r = sh([os.path.join(BIN, "trun"), "--standalone", "--nproc-per-node", "1", "--health-check", mode,
                    "--no-python", "/bin/true"], timeout=120)
            launch[mode].append({"exit": r.returncode, "wall_ms": (time.time() - t0) * 1000})
            if i == 0:
                open(os.path.join(LOGS, f"health-launch-{mode}.log"), "w").write(r.stdout + r.stderr)
    out["launch"] = {m: {"runs": v, "wall_ms_median": statistics.median(x["wall_ms"] for x in v)}
                     for m, v in launch.items()}
    log(f"health: launch to exit with --health-check fail {out['launch']['fail']['wall_ms_median']:.1f} ms, "
        f"off {out['launch']['off']['wall_ms_median']:.1f} ms (median of 5; exits "
        f"{[x['exit'] for x in launch['fail']]} / {[x['exit'] for x in launch['off']]})")


def smi_nvlinks(gpus=None):
    """nvidia-smi nvlink -s (each GPU's links: "Link N: <speed>" or "<inactive>"), for the GPUs given (all by
    default): ({gpu index: {"active": n, "inactive": n, "gbps": [..]}}, raw text)."""
    texts = []
    for g in (gpus if gpus is not None else [None]):
        try:
            r = sh(["nvidia-smi", "nvlink", "-s"] + (["-i", str(g)] if g is not None else []), timeout=60)
            texts.append(r.stdout + r.stderr)
        except (OSError, subprocess.TimeoutExpired) as e:
            texts.append(f"nvidia-smi nvlink -s: {e!r}\n")
    text = "".join(texts)
    return parse_nvlinks(text), text


def parse_nvlinks(text):
    """nvidia-smi nvlink -s's text: {gpu index: {"active": n, "inactive": n, "gbps": [each active link's]}}."""
    out, cur = {}, None
    for ln in text.splitlines():
        m = re.match(r"^GPU (\d+):", ln)
        if m:
            cur = out.setdefault(int(m.group(1)), {"active": 0, "inactive": 0, "gbps": []})
            continue
        m = re.match(r"^\s*Link (\d+): (.*)$", ln)
        if m and cur is not None:
            v = re.match(r"([0-9.]+) GB/s", m.group(2).strip())
            if v:
                cur["active"] += 1
                cur["gbps"].append(float(v.group(1)))
            else:
                cur["inactive"] += 1
    return out


def nvlink_views():
    """trun-topo health's nvlink check next to nvidia-smi nvlink -s, for all the box's GPUs and for the 2-GPU
    view (CUDA_VISIBLE_DEVICES=0,1 for trun-topo; nvidia-smi -i 0 and -i 1)."""
    n = gpu_count()
    views = [("all", None, None)] + ([("gpus01", "0,1", [0, 1])] if n > 2 else [])
    out = {}
    for tag, cvd, idx in views:
        env = dict(os.environ)
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        t0 = time.time()
        r = sh([os.path.join(BIN, "trun-topo"), "health", "--json", "--checks", "nvml,gpu-count,nvlink"], env=env,
               timeout=120)
        wall = (time.time() - t0) * 1000
        open(os.path.join(LOGS, f"health-nvlink-{tag}.json"), "w").write(r.stdout + r.stderr)
        smi, text = smi_nvlinks(idx)
        open(os.path.join(LOGS, f"nvidia-smi-nvlink-{tag}.txt"), "w").write(text)
        try:
            h = json.loads(r.stdout)
            checks = {c["name"]: {k: c.get(k) for k in ("status", "value", "reason")} for c in h["checks"]}
            gpus = h.get("gpus")
        except (ValueError, KeyError):
            checks, gpus = {"error": f"exit {r.returncode}: {r.stderr[-300:]}"}, None
        row = {"trun_topo_gpus": gpus, "trun_topo": checks, "trun_topo_wall_ms": round(wall, 1),
               "smi_gpus": len(smi), "smi_active_links": sum(v["active"] for v in smi.values()),
               "smi_inactive_links": sum(v["inactive"] for v in smi.values()),
               "smi_link_gbps": sorted({x for v in smi.values() for x in v["gbps"]})}
        out[tag] = row
        log(f"nvlink {tag}: trun-topo {gpus} GPU(s), nvlink {checks.get('nvlink', {}).get('status')} "
            f"({checks.get('nvlink', {}).get('value')}); nvidia-smi {row['smi_gpus']} GPU(s), "
            f"{row['smi_active_links']} active / {row['smi_inactive_links']} inactive links at "
            f"{row['smi_link_gbps']} GB/s")
    return out


def main():
    global res
    os.makedirs(LOGS, exist_ok=True)
    result = RESULT
    try:  # a run of other GPU_STEPS earlier in this $OUT (bench/gpu4.sh runs one step a call): kept, added to
        res = json.load(open(result))
        res.setdefault("steps", {})
    except (OSError, ValueError):
        pass
    for args, mode in ((["-L"], "w"), (["topo", "-m"], "a")):
        try:
            r = sh(["nvidia-smi"] + args, timeout=60)
            open(os.path.join(LOGS, "gpus.txt"), mode).write(r.stdout + r.stderr)
        except (OSError, subprocess.TimeoutExpired) as e:
            open(os.path.join(LOGS, "gpus.txt"), mode).write(f"nvidia-smi {' '.join(args)}: {e!r}\n")
    import torch
    res["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    res["gpu_names"] = GPU_NAMES
    res["torch"] = torch.__version__
    res["gpus"] = torch.cuda.device_count()
    res["gpu_name"] = torch.cuda.get_device_name(0) if res["gpus"] else None
    res["gpu_steps"] = ",".join(x for x in [res.get("gpu_steps")] + [os.environ.get("GPU_STEPS") or "all"] if x)
    log(f"torch {res['torch']}, {res['gpus']} GPU(s) {res['gpu_name']}")
    steps = (interop, envcmp, launch, nccl, store_bench, preflight, layouts, c10d, ddp, fsdp, stall, health, onegpu,
             hang)
    only = os.environ.get("GPU_STEPS")  # e.g. GPU_STEPS=interop,nccl
    if only:
        steps = [s for s in steps if s.__name__ in only.split(",")]
    json.dump(res, open(result, "w"), indent=1)
    for step in steps:
        t0 = time.time()
        try:
            step()
        except Exception as e:  # noqa: BLE001
            log(f"{step.__name__}: failed: {e!r}")
            res["steps"].setdefault("errors", []).append(f"{step.__name__}: {e!r}")
        log(f"[{step.__name__} took {time.time() - t0:.0f} s]")
        json.dump(res, open(result, "w"), indent=1)
    log(f"results: $OUT/{NAME}.json and $OUT/{NAME}/ (copy both into bench/results/ to commit them)")


if __name__ == "__main__":
    main()

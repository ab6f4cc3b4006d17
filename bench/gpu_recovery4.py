"""Issue 39 on an N-GPU box (N = every GPU of the box: 2, 4 or 8), in ONE device call of at most ~8 minutes:

  1. launch: N no-op workers (/bin/true), trun vs torchrun (median of 4, interleaved), --nproc-per-node N and
     --nproc-per-node gpu, trun also with --health-check off (the gate's share); then one trun launch at
     TRUN_LOG_LEVEL=debug whose lines (each stamped @<unix time>) give the breakdown from the launch's start.
  2. recovery: 1 node x N GPUs, NCCL, an all-reduce every 50 ms; the last rank crashes (os._exit(1)) and the
     time runs until all N replacements have set up CUDA, formed the NCCL group and all-reduced. One job per
     configuration with --max-restarts C: C crashes, C samples (GPU_R4_CRASHES, default 2). Configurations:
     trun cold, --warm-start, --warm-start --warm-start-cuda (and + --warm-start-nccl: "trun-warm-cuda-nccl"),
     and --warm-start-cuda with each NCCL setting that may
     cut communicator set-up: NCCL_CUMEM_ENABLE=0, NCCL_TOPO_FILE (the box's topology as NCCL_TOPO_DUMP_FILE
     wrote it in a short job first: nccl-topo.xml), both, both + NCCL_GRAPH_FILE (the same job's
     NCCL_GRAPH_DUMP_FILE: nccl-graph.xml), NCCL_NET_PLUGIN=none + NCCL_IB_DISABLE=1 (no network
     probing), NCCL_RUNTIME_CONNECT=0, NCCL_SOCKET_IFNAME=lo; "+debug_init" runs the same with
     NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT into one file per process, and the JSON gets each replacement's
     "Init timings" line (total, kernels, alloc, bootstrap, allgathers, topo, graphs, connections, rest:
     where its communicator set-up goes); torchrun 2.11 once. Each sample has its timeline: the crashed
     worker's exit, the survivors' exits (trun's events), the replacements' start (handover), and in each
     replacement script start, torch imported, CUDA context, process group, first all-reduce (the workers'
     own clocks; one machine, one clock); and when each exiting worker's output pipe ended, before trun
     reaped it (trun's debug lines).
  3. busbw: the steady-state cost of each setting: all-reduce busbw at 8 MiB and 1 GiB (examples/
     allreduce_nccl.py --graph, N ranks under trun) with and without it, interleaved twice.
A warm configuration crashes only once every pool process is ready (blocked in recvmsg on its control socket,
from /proc), so the pool is never caught importing; a start that still waited for one is flagged (pool_waited,
from trun's debug lines). trun runs with --restart-backoff 0 --crash-loop 0: it restarts at once every time, as
torchrun does (by default its second fast failure in a row waits 1 s).

Run on the GPU box (build/portable carried):  python3 bench/gpu_recovery4.py   (bench/gpu4.sh runs it)
Env: OUT (results dir, default build/gpu-results), TRUN_BIN (default build/portable), GPU_R4_STEPS (comma
list of launch, recovery, busbw; default launch,recovery), GPU_R4_BUDGET (seconds for everything, default
450: steps that would not fit are skipped and listed), GPU_R4_CRASHES (2), GPU_R4_CONFIGS (comma list of
configuration names to run, in that order; default all), GPU_R4_BUSBW (comma list of busbw variants: default,
cumem0, topofile, runtime_connect0, nonet), GPU_R4_BACKEND (nccl; gloo tries the script on a CPU box: N = 2
workers on the CPU, no --nproc-per-node gpu, no busbw, e.g.
GPU_R4_BACKEND=gloo TRUN_BIN=build PYTHON=/usr/bin/python3 /usr/bin/python3 bench/gpu_recovery4.py).
Writes $OUT/<date>-<gpu>-recovery4/recovery4.json after every step (a killed run leaves what it measured), its
run.log and the logs of each configuration.
"""
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

REPO, BIN, TRUN, PY = gc.REPO, gc.BIN, gc.TRUN, gc.PY
BACKEND = os.environ.get("GPU_R4_BACKEND", "nccl")
BUDGET = float(os.environ.get("GPU_R4_BUDGET", "450"))
CRASHES = int(os.environ.get("GPU_R4_CRASHES", "2"))
STEPS = (os.environ.get("GPU_R4_STEPS") or "launch,recovery").split(",")
LOGS = None  # the step's folder, made by main()
gc.nvls_off()  # NVLink multicast stays off on the shared GPU box, in every process this starts
gc.exit_on_term()
TORCHRUN = None  # main() picks it
JOB_CAP = 150.0  # one recovery job, whatever happens
TORCHRUN_CAP = 45.0  # torchrun: a recovery not seen this long after the crash counts as none

WORKER = gc.WORKER_READY + r'''
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
with open(os.path.join(d, "ready.%d.%d" % (attempt, rank)), "w") as f:
    json.dump({"pid": os.getpid(), "preloaded": preloaded, "t0": t0, "import": t_import, "cuda": t_cuda,
               "pg": t_pg, "ready": t_ready}, f)
go = os.path.join(d, "go.%d" % attempt)
while True:  # training: an all-reduce every 50 ms; the last rank crashes once the bench says go
    if rank == world - 1 and os.path.exists(go):
        open(os.path.join(d, "crash.%d" % attempt), "w").write(repr(time.time()))
        os._exit(1)
    dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    time.sleep(0.05)
'''

rs = None  # gc.Results, made by main()
res = {}  # rs.res


def log(msg, console=True):
    rs.log(msg, console)


def left():
    return rs.left()


def save():
    return rs.save()


def skip(what, need):
    return rs.skip(what, need)


def gpus():
    if BACKEND != "nccl":
        return 0
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def killtree(p, token):
    gc.killtree(p, token)


underscored = gc.underscored


# ---- 1. launch -------------------------------------------------------------------------------------------

def timed(cmd, env, timeout=120):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return r.returncode, time.perf_counter() - t, r.stderr


def launch(n, ngpu):
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", NCCL_NVLS_ENABLE="0")
    torchrun = TORCHRUN
    variants = [("n", str(n))] + ([("gpu", "gpu")] if ngpu > 0 else [])
    cmds = {}
    for tag, spec in variants:
        common = ["--standalone", "--nproc-per-node", spec, "--monitor-interval", "0.1", "--no-python", "/bin/true"]
        cmds[f"trun/{tag}"] = [TRUN] + common
        cmds[f"trun-health-off/{tag}"] = [TRUN, "--health-check", "off"] + common
        cmds[f"torchrun/{tag}"] = torchrun + [underscored(c) for c in common]
    samples = {k: [] for k in cmds}
    for rep in range(4):
        for name, cmd in cmds.items():
            if name.startswith("torchrun") and skip(f"launch {name} rep {rep}", 60 + 12):
                continue
            rc, wall, err = timed(cmd, env)
            if rc != 0:
                log(f"launch {name}: exit {rc}: {err[-300:]}")
                res["errors"].append(f"launch {name}: exit {rc}: {err[-300:]}")
                continue
            samples[name].append(wall)
    table = []
    for name, s in samples.items():
        if s:
            table.append({"launcher": name.split("/")[0], "nproc": name.split("/")[1] if name.endswith("gpu") else n,
                          "median_ms": round(statistics.median(s) * 1000, 1), "runs_ms": [round(x * 1000, 1) for x in s]})
            log(f"launch {name:22s} {table[-1]['median_ms']:8.1f} ms  {table[-1]['runs_ms']}")
    for tag, _ in variants:
        a, b = samples.get(f"torchrun/{tag}"), samples.get(f"trun/{tag}")
        if a and b:
            res.setdefault("launch_speedup", {})[tag] = round(statistics.median(a) / statistics.median(b), 1)
    res["steps"]["launch"] = table
    save()
    # The breakdown: one launch at debug level, each line's time from the launch's start.
    for tag, spec in variants:
        denv = dict(env, TRUN_LOG_LEVEL="debug")
        t = time.time()
        r = subprocess.run([TRUN, "--standalone", "--nproc-per-node", spec, "--no-python", "/bin/true"], env=denv,
                           capture_output=True, text=True, timeout=60)
        end = time.time()
        lines = []
        for ln in r.stderr.splitlines():
            m = re.search(r"@(\d+\.\d+)\)$", ln)
            lines.append((f"+{(float(m.group(1)) - t) * 1000:7.1f} ms  " if m else " " * 14) + ln)
        lines.append(f"+{(end - t) * 1000:7.1f} ms  trun exited {r.returncode}")
        open(os.path.join(LOGS, f"launch-debug-{tag}.txt"), "w").write("\n".join(lines) + "\n")
        res["steps"].setdefault("launch_breakdown", {})[tag] = lines
        log(f"launch breakdown (--nproc-per-node {spec}, TRUN_LOG_LEVEL=debug):\n    " + "\n    ".join(lines))
    ex = subprocess.run([TRUN, "--explain", "--nproc-per-node", str(n), "x.py"], env=env, capture_output=True,
                        text=True, timeout=60)
    open(os.path.join(LOGS, "explain.txt"), "w").write(ex.stdout + ex.stderr)
    save()


# ---- 2. recovery -----------------------------------------------------------------------------------------

events = gc.events


def pool_ready(token, workers):
    return gc.pool_ready(token, workers)


def pipe_ends(err_path):
    """trun's debug lines "rank R (...): its output pipe ended while it still runs (... @T)": [(rank, T)]. A
    process's files close before its parent learns of its exit (with CUDA, the driver's teardown in between):
    how much sooner a crash could be known."""
    try:
        text = open(err_path).read()
    except OSError:
        return []
    return [(int(m.group(1)), float(m.group(2))) for m in
            re.finditer(r"rank (\d+) \(local \d+, pid \d+\): its output pipe ended while it still runs \(.*@(\d+\.\d+)\)",
                        text)]


def sample(d, k, n, evs, crash, ends=()):
    """Crash k (in attempt k) until the N replacements (attempt k+1) are ready: seconds and the timeline."""
    rs = []
    for r in range(n):
        try:
            rs.append(json.load(open(os.path.join(d, f"ready.{k + 1}.{r}"))))
        except (OSError, ValueError):
            return None
    ms = lambda t: round((t - crash) * 1000, 1)  # noqa: E731
    tl = {"crash_utc": datetime.datetime.fromtimestamp(crash, datetime.timezone.utc).strftime("%H:%M:%S.%f"),
          "replacements_started_warm": sum(1 for x in rs if x["preloaded"])}
    ex = [e for e in evs if e.get("event") == "worker_exit" and e["t"] > crash - 1]
    crashed = [e for e in ex if e.get("rank") == n - 1]
    surv = [e for e in ex if e.get("rank") != n - 1]
    starts = [e for e in evs if e.get("event") == "worker_start" and e.get("attempt") == k + 1]
    if crashed:
        tl["crashed_exit_ms"] = ms(crashed[0]["t"])
    if surv:
        tl["survivors_exit_ms"] = [ms(e["t"]) for e in surv[: n - 1]]
    if starts:
        tl["handover_ms"] = [ms(e["t"]) for e in starts]
    late = [(r, t) for r, t in ends if t > crash - 1]
    if late:
        tl["crashed_pipe_end_ms"] = [ms(t) for r, t in late if r == n - 1][:1]
        tl["survivors_pipe_end_ms"] = [ms(t) for r, t in late if r != n - 1][: n - 1]
    for key in ("t0", "import", "cuda", "pg", "ready"):
        tl[f"workers_{key}_ms"] = [ms(x[key]) for x in rs]
    return max(x["ready"] for x in rs) - crash, tl


def recovery_job(name, base, extra_env, n, crashes, warm):
    d = tempfile.mkdtemp(prefix=f"r4-{name}.")
    script = os.path.join(d, "w.py")
    open(script, "w").write(WORKER)
    ev = os.path.join(d, "events.jsonl")
    token = f"{name}-{os.getpid()}-{time.time():.6f}"
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", PYTHON_EXEC=PY, TRUN_LOG_LEVEL="debug",
               **{gc.JOB_VAR: token}, **extra_env)
    env["NCCL_NVLS_ENABLE"] = "0"
    if extra_env.get("NCCL_DEBUG_FILE") == "@":  # NCCL's own lines, one file per process, read after the job
        env["NCCL_DEBUG_FILE"] = os.path.join(d, "nccl.%h.%p.log")
    if BACKEND != "nccl":
        env.pop("CUDA_VISIBLE_DEVICES", None)
    is_trun = base[0] == TRUN
    skip_args = len(base)  # torchrun: its options in its own spelling
    # trun as torchrun restarts: at once, every time (no back-off after a second fast failure, no crash-loop stop)
    trun_opts = ["--events", ev, "--restart-backoff", "0", "--crash-loop", "0"]
    cmd = base + (trun_opts if is_trun else []) + ["--standalone", "--nproc-per-node", str(n),
                                                          "--max-restarts", str(crashes), "--monitor-interval", "0.1",
                                                          script, d, BACKEND]
    if not is_trun:
        cmd = [underscored(c) if i >= skip_args else c for i, c in enumerate(cmd)]
    errp, outp = os.path.join(d, "launcher.err"), os.path.join(d, "launcher.out")
    start = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=open(outp, "w"), stderr=open(errp, "w"), start_new_session=True)
    runs, notes = [], []
    crash, before = None, 0
    try:
        for k in range(crashes + 1):
            deadline = start + JOB_CAP
            while not all(os.path.exists(os.path.join(d, f"ready.{k}.{r}")) for r in range(n)):
                if p.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"attempt {k}: not all {n} workers ready (launcher "
                                       f"{'exit ' + str(p.returncode) if p.poll() is not None else 'still running'})")
                if crash is not None and not is_trun and time.time() > crash + TORCHRUN_CAP:
                    raise RuntimeError(f"no recovery within {TORCHRUN_CAP:.0f} s of the crash")
                time.sleep(0.02)
            if k > 0:
                s = sample(d, k - 1, n, events(ev), crash, pipe_ends(errp))
                if s:
                    secs, tl = s
                    # whether this start had to wait for a pool process still importing (it should not)
                    tl["pool_waited"] = open(errp).read().count("still importing") > before if warm else None
                    runs.append({"seconds": round(secs, 3), "timeline": tl})
                    rs.log(f"recovery {name:32s} crash {k}: {secs:.3f} s  {json.dumps(tl)}", console=False)
            if k == crashes:
                break
            # Crash once the pool is refilled and every pool process is ready (warm), else after a settle.
            t_wait = time.time()
            if warm:
                workers = {json.load(open(os.path.join(d, f"ready.{k}.{r}")))["pid"] for r in range(n)}
                while pool_ready(token, workers) < n and time.time() - t_wait < 60:
                    time.sleep(0.1)
                if pool_ready(token, workers) < n:
                    notes.append(f"crash {k}: only {pool_ready(token, workers)} of {n} pool processes ready after 60 s")
            time.sleep(0.5)
            before = open(errp).read().count("still importing")
            crash_file = os.path.join(d, f"crash.{k}")
            open(os.path.join(d, f"go.{k}"), "w").close()
            while not os.path.exists(crash_file):
                if p.poll() is not None:
                    raise RuntimeError(f"launcher exited {p.returncode} before crash {k}")
                time.sleep(0.01)
            time.sleep(0.05)
            crash = float(open(crash_file).read())
    except Exception as e:  # noqa: BLE001
        notes.append(str(e))
        log(f"recovery {name}: {e}")
    finally:
        killtree(p, token)
        err = open(errp).read() if os.path.exists(errp) else ""
        waits = err.count("still importing")
        init = nccl_init_timings(d, n, crashes, name)
        for f in ("launcher.err", "launcher.out", "events.jsonl"):
            src = os.path.join(d, f)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(LOGS, f"{name}-{f}"))
        shutil.rmtree(d, ignore_errors=True)
    return {"config": name, "cmd": " ".join(base), "env": extra_env, "runs": runs,
            "median_s": round(statistics.median(r["seconds"] for r in runs), 3) if runs else None,
            "notes": notes, "pool_import_waits": waits if warm else None, "wall_s": round(time.time() - start, 1),
            **({"nccl_init": init} if init else {})}


INIT_RE = re.compile(r"Init timings.*")


def nccl_init_timings(d, n, crashes, name):
    """NCCL's "Init timings" line of each process (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT, one file per process
    in d), by attempt and rank (the pids from the workers' ready files): where a replacement's communicator
    set-up goes (total, kernels, alloc, bootstrap, allgathers, topo, graphs, connections, rest; seconds). The
    lines of every process also go to <config>-nccl-init.txt in the logs."""
    files = [f for f in os.listdir(d) if f.startswith("nccl.") and f.endswith(".log")]
    if not files:
        return None
    who = {}
    for k in range(crashes + 1):
        for r in range(n):
            try:
                who[json.load(open(os.path.join(d, f"ready.{k}.{r}")))["pid"]] = (k, r)
            except (OSError, ValueError, KeyError):
                pass
    out, keep = {}, []
    for f in sorted(files):
        try:
            pid = int(f.rsplit(".", 2)[-2])
        except ValueError:
            continue
        k, r = who.get(pid, (None, None))
        try:
            lines = open(os.path.join(d, f), errors="replace").read().splitlines()
        except OSError:
            continue
        keep += [f"attempt {k} rank {r} pid {pid}: {ln}" for ln in lines
                 if "+trace" in name or "Init timings" in ln or "Init COMPLETE" in ln or "init.cc" in ln]
        for ln in lines:
            m = INIT_RE.search(ln)
            if m:
                parts = {a: float(b) for a, b in re.findall(r"([a-z]+) ([0-9.]+)", m.group(0))}
                out.setdefault(str(k), []).append({"rank": r, **parts})
    open(os.path.join(LOGS, f"{name}-nccl-init.txt"), "w").write("\n".join(keep) + "\n")
    return out


TOPO_DUMP = r'''
import os, torch, torch.distributed as dist
lr = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(lr)
dist.init_process_group("nccl")
x = torch.ones(1, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
dist.destroy_process_group()
'''


def topo_file(n):
    """NCCL's topology of this box as NCCL_TOPO_DUMP_FILE writes it (one short job of n ranks), kept in the
    step's folder for NCCL_TOPO_FILE: the replacements' communicators then start from it; the same job's
    NCCL_GRAPH_DUMP_FILE (the rings and trees NCCL searched) beside it, nccl-graph.xml, for NCCL_GRAPH_FILE.
    None without GPUs."""
    if BACKEND != "nccl":
        return None
    path = os.path.join(LOGS, "nccl-topo.xml")
    if os.path.exists(path):
        return path
    d = tempfile.mkdtemp(prefix="r4-topo.")
    open(os.path.join(d, "t.py"), "w").write(TOPO_DUMP)
    env = dict(os.environ, PYTHON_EXEC=PY, NCCL_TOPO_DUMP_FILE=path, NCCL_NVLS_ENABLE="0",
               NCCL_GRAPH_DUMP_FILE=os.path.join(LOGS, "nccl-graph.xml"))
    r = subprocess.run([TRUN, "--standalone", "--nproc-per-node", str(n), os.path.join(d, "t.py")], env=env,
                       capture_output=True, text=True, timeout=120)
    shutil.rmtree(d, ignore_errors=True)
    if r.returncode != 0 or not os.path.exists(path):
        log(f"NCCL topology dump: trun exited {r.returncode}, {'no file' if not os.path.exists(path) else 'file'}: "
            f"{r.stderr[-300:]}")
        return None
    return path


DEBUG_INIT = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": "@"}
# "+trace": NCCL's lines of more subsystems with microsecond UTC timestamps, every line kept (<config>-nccl-init.txt),
# to lay beside the timeline (its crash_utc): where a replacement's time goes after init_process_group.
TRACE = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P,ALLOC,BOOTSTRAP,PROXY,NET,ENV", "NCCL_DEBUG_FILE": "@",
         "NCCL_DEBUG_TIMESTAMP_LEVELS": "ALL", "NCCL_DEBUG_TIMESTAMP_FORMAT": "[%T.%6f] ", "TZ": "UTC"}


def configs():
    """(name, launcher argv, extra environment, warm). "@topo" stands for the box's NCCL topology file
    (topo_file), NCCL_DEBUG_FILE "@" for one file per process in the job's folder."""
    warm, cuda = [TRUN, "--warm-start"], [TRUN, "--warm-start", "--warm-start-cuda"]
    nccl = cuda + ["--warm-start-nccl"]
    topo, cumem0 = {"NCCL_TOPO_FILE": "@topo"}, {"NCCL_CUMEM_ENABLE": "0"}
    out = [("trun-cold", [TRUN], {}, False), ("trun-warm", warm, {}, True), ("trun-warm-cuda", cuda, {}, True),
           ("trun-warm-cuda-nccl", nccl, {}, True), ("trun-warm-cuda-nccl+debug_init", nccl, DEBUG_INIT, True),
           ("trun-warm-cuda-nccl+trace", nccl, TRACE, True), ("trun-warm-cuda+trace", cuda, TRACE, True),
           ("trun-warm-cuda+cumem0", cuda, cumem0, True),
           ("trun-warm-cuda+debug_init", cuda, DEBUG_INIT, True),
           ("trun-warm-cuda+topofile", cuda, topo, True),
           ("trun-warm-cuda+cumem0+topofile", cuda, {**cumem0, **topo}, True),
           ("trun-warm-cuda+cumem0+topo+graph", cuda, {**cumem0, **topo, "NCCL_GRAPH_FILE": "@graph"}, True),
           ("trun-warm-cuda+cumem0+debug_init", cuda, {**cumem0, **DEBUG_INIT}, True),
           ("trun-warm-cuda+nonet", cuda, {"NCCL_NET_PLUGIN": "none", "NCCL_IB_DISABLE": "1"}, True),
           ("trun-warm-cuda+runtime_connect0", cuda, {"NCCL_RUNTIME_CONNECT": "0"}, True),
           ("trun-warm-cuda+ifname_lo", cuda, {"NCCL_SOCKET_IFNAME": "lo"}, True),
           ("trun-warm+cumem0", warm, cumem0, True),
           ("torchrun", TORCHRUN, {}, False)]
    only = os.environ.get("GPU_R4_CONFIGS")
    if only:
        keep = only.split(",")
        out = sorted((c for c in out if c[0] in keep), key=lambda c: keep.index(c[0]))  # in the order named
        return out
    # torchrun before the NCCL variants: the side-by-side figure matters more than the last variant
    order = ["trun-cold", "trun-warm", "trun-warm-cuda", "torchrun"]
    return sorted(out, key=lambda c: order.index(c[0]) if c[0] in order else len(order))


def recovery(n):
    table = []
    res["steps"]["recovery"] = table
    for name, base, extra, warm in configs():
        crashes = 1 if name == "torchrun" else CRASHES
        need = 25 + 12 * crashes if warm else 20 + 10 * crashes
        if name == "torchrun":
            need = 25 + TORCHRUN_CAP
        if skip(f"recovery {name}", need):
            continue
        if extra.get("NCCL_TOPO_FILE") == "@topo":
            path = topo_file(n)
            graph = os.path.join(LOGS, "nccl-graph.xml")
            if path is None or (extra.get("NCCL_GRAPH_FILE") == "@graph" and not os.path.exists(graph)):
                res["skipped"].append(f"recovery {name}: no NCCL topology or graph file (no GPU, or NCCL wrote none)")
                log(res["skipped"][-1])
                continue
            extra = dict(extra, NCCL_TOPO_FILE=path)
            if "NCCL_GRAPH_FILE" in extra:
                extra["NCCL_GRAPH_FILE"] = graph
        row = recovery_job(name, base, extra, n, crashes, warm)
        table.append(row)
        init = (row.get("nccl_init") or {}).get("1") or []
        slow = max(init, key=lambda x: x.get("total", 0)) if init else None
        log(f"recovery {name}: median {row['median_s']} s, runs {[r['seconds'] for r in row['runs']]}; job "
            f"{row['wall_s']} s"
            + (f"; a replacement's NCCL init (slowest rank): {json.dumps(slow)}" if slow else "")
            + (f"; notes: {row['notes']}" if row["notes"] else ""))
        save()


# ---- 3. the steady-state cost of each NCCL setting ----------------------------------------------------------

BUSBW_VARIANTS = (("default", {}), ("cumem0", {"NCCL_CUMEM_ENABLE": "0"}), ("topofile", {"NCCL_TOPO_FILE": "@topo"}),
                  ("runtime_connect0", {"NCCL_RUNTIME_CONNECT": "0"}),
                  ("nonet", {"NCCL_NET_PLUGIN": "none", "NCCL_IB_DISABLE": "1"}))


def busbw(n):
    """All-reduce busbw at 8 MiB and 1 GiB (examples/allreduce_nccl.py, CUDA graph, under trun, n ranks) with
    each setting and without, interleaved twice: whether trun may set it under --warm-start at no cost."""
    table = {}
    res["steps"]["busbw"] = table
    if BACKEND != "nccl":
        res["skipped"].append("busbw: needs GPUs (examples/allreduce_nccl.py is NCCL only)")
        log(res["skipped"][-1])
        return
    script = os.path.join(REPO, "examples", "allreduce_nccl.py")
    only = os.environ.get("GPU_R4_BUSBW")
    variants = [v for v in BUSBW_VARIANTS if not only or v[0] in only.split(",")]
    for rep in range(2):
        for tag, extra in variants:
            if skip(f"busbw {tag} rep {rep}", 20):
                continue
            if extra.get("NCCL_TOPO_FILE") == "@topo":
                path = topo_file(n)
                if path is None:
                    continue
                extra = dict(extra, NCCL_TOPO_FILE=path)
            env = dict(os.environ, PYTHON_EXEC=PY, OMP_NUM_THREADS="1", **extra)
            env["NCCL_NVLS_ENABLE"] = "0"
            t = time.time()
            r = subprocess.run([TRUN, "--standalone", "--nproc-per-node", str(n), script, "--sizes", "8M,1G",
                                "--iters", "20", "--graph"], env=env, capture_output=True, text=True, timeout=180)
            with open(os.path.join(LOGS, "busbw-runs.txt"), "a") as f:
                f.write(f"== {tag} rep {rep}: exit {r.returncode}, {time.time() - t:.1f} s\n{r.stdout}"
                        f"{r.stderr[-2000:]}\n")
            got = gc.ar_lines(r.stdout)
            row = table.setdefault(tag, {"env": extra, "runs": []})
            row["runs"].append({"rc": r.returncode, **{str(b): v["busbw"] for b, v in got.items()}})
            log(f"busbw {tag:18s} rep {rep}: " + (", ".join(f"{b >> 20} MiB {v['busbw']:.1f} GB/s"
                                                           for b, v in sorted(got.items())) or f"exit {r.returncode}"))
            save()
    for tag, row in table.items():
        for b in (str(8 << 20), str(1 << 30)):
            vals = [x[b] for x in row["runs"] if b in x]
            if vals:
                row[f"median_{b}"] = statistics.median(vals)


def main():
    global TORCHRUN, LOGS, rs, res
    rs = gc.Results("recovery4", BUDGET)
    res, LOGS = rs.res, rs.dir
    TORCHRUN = list(gc.torchrun_cmd())
    n = gpus()
    if BACKEND == "nccl" and n == 0:
        log("no GPU visible: run with GPU_R4_BACKEND=gloo to try the script on a CPU box")
        sys.exit(2)
    n = n or 2
    names = gc.box(rs, BACKEND)
    res.update({"nproc": n, "crashes_per_job": CRASHES})
    log(f"recovery4: {n} workers, backend {BACKEND}, torch {res['torch']}, {len(names)} GPU(s) {names[:1]}, "
        f"budget {BUDGET:.0f} s, steps {STEPS}")
    save()
    steps = {"launch": lambda: launch(n, len(names)), "recovery": lambda: recovery(n), "busbw": lambda: busbw(n)}
    for name in STEPS:
        try:
            steps[name]()
        except Exception as e:  # noqa: BLE001
            import traceback
            res["errors"].append(traceback.format_exc()[-1500:])
            log(f"step {name} failed: {e}")
        save()
    log(f"results: {save()}; {time.time() - rs.t0:.0f} s")


if __name__ == "__main__":
    main()

"""Issue 39 on an N-GPU box (N = every GPU of the box: 2, 4 or 8), in ONE device call of at most ~8 minutes:

  1. launch: N no-op workers (/bin/true), trun vs torchrun (median of 4, interleaved), --nproc-per-node N and
     --nproc-per-node gpu, trun also with --health-check off (the gate's share); then one trun launch at
     TRUN_LOG_LEVEL=debug whose lines (each stamped @<unix time>) give the breakdown from the launch's start.
  2. recovery: 1 node x N GPUs, NCCL, an all-reduce every 50 ms; the last rank crashes (os._exit(1)) and the
     time runs until all N replacements have set up CUDA, formed the NCCL group and all-reduced. One job per
     configuration with --max-restarts C: C crashes, C samples (GPU_R4_CRASHES, default 2). Configurations:
     trun cold, --warm-start, --warm-start --warm-start-cuda, and the latter with each NCCL setting that may
     cut communicator set-up (NCCL_RUNTIME_CONNECT=0, NCCL_CUMEM_ENABLE=0, NCCL_SOCKET_IFNAME=lo); torchrun
     2.11 once. Each sample has its timeline: the crashed worker's exit, the survivors' exits (trun's events),
     the replacements' start (handover), and in each replacement script start, torch imported, CUDA context,
     process group, first all-reduce (the workers' own clocks; one machine, one clock); and when each
     exiting worker's output pipe ended, before trun reaped it (trun's debug lines).
A warm configuration crashes only once every pool process is ready (blocked in recvmsg on its control socket,
from /proc), so the pool is never caught importing; a start that still waited for one is flagged (pool_waited,
from trun's debug lines). trun runs with --restart-backoff 0 --crash-loop 0: it restarts at once every time, as
torchrun does (by default its second fast failure in a row waits 1 s).

Run on the GPU box (build/portable carried):  python3 bench/gpu_recovery4.py
Env: OUT (results dir, default build/gpu-results), TRUN_BIN (default build/portable), GPU_R4_BUDGET (seconds
for everything, default 450: steps that would not fit are skipped and listed), GPU_R4_CRASHES (2),
GPU_R4_CONFIGS (comma list of configuration names to run, default all), GPU_R4_BACKEND (nccl; gloo tries the
script on a CPU box: N = 2 workers on the CPU, no --nproc-per-node gpu, e.g.
GPU_R4_BACKEND=gloo TRUN_BIN=build PYTHON=/usr/bin/python3 /usr/bin/python3 bench/gpu_recovery4.py).
Writes $OUT/<date>-gpu-recovery4.json after every step (a killed run leaves what it measured) and the logs in
$OUT/gpu-recovery4-logs/.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
TRUN = os.path.join(BIN, "trun")
OUT = os.environ.get("OUT") or os.path.join(REPO, "build", "gpu-results")
LOGS = os.path.join(OUT, "gpu-recovery4-logs")
PY = os.environ.get("PYTHON", sys.executable)
BACKEND = os.environ.get("GPU_R4_BACKEND", "nccl")
BUDGET = float(os.environ.get("GPU_R4_BUDGET", "450"))
CRASHES = int(os.environ.get("GPU_R4_CRASHES", "2"))
T0 = time.time()
# NVLink multicast stays off on the shared GPU box, in every process this starts (as bench/gpu.sh does).
for _k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(_k, "0" if _k == "NCCL_NVLS_ENABLE" else "1")
os.environ.setdefault("PYTHONUNBUFFERED", "1")
TORCHRUN = None  # main() picks it
JOB_CAP = 150.0  # one recovery job, whatever happens
TORCHRUN_CAP = 45.0  # torchrun: a recovery not seen this long after the crash counts as none

WORKER = r'''
import json, os, sys, time
t0 = time.time()
preloaded = "torch" in sys.modules
d, backend = sys.argv[1], sys.argv[2]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
lr, rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
import torch, torch.distributed as dist
t_import = time.time()
dev = torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(lr)
    dev = torch.device("cuda", lr)
    torch.empty(1, device=dev)  # the CUDA context and the caching allocator
t_cuda = time.time()
dist.init_process_group(backend)
t_pg = time.time()
x = torch.ones(1, device=dev)
dist.all_reduce(x)
if backend == "nccl":
    torch.cuda.synchronize()
t_ready = time.time()
assert int(x.item()) == world, x
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

res = {"steps": {}, "skipped": [], "errors": []}


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)
    with open(os.path.join(LOGS, "run.log"), "a") as f:
        f.write(msg + "\n")


def left():
    return BUDGET - (time.time() - T0)


def save():
    res["elapsed_s"] = round(time.time() - T0, 1)
    path = os.path.join(OUT, datetime.date.today().isoformat() + "-gpu-recovery4.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, path)
    return path


def skip(what, need):
    if left() >= need:
        return False
    why = f"{what}: skipped, {left():.0f} s of the budget left, it needs about {need:.0f} s"
    res["skipped"].append(why)
    log(why)
    save()
    return True


def gpus():
    if BACKEND != "nccl":
        return 0
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def killtree(p, token):
    """Stops a launcher: SIGTERM (it stops its workers), then SIGKILL to its group and to every process that
    carries its token in its environment (workers and pool processes lead sessions of their own)."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    # the pool processes and workers lead sessions of their own: trun's guard kills them with trun; be sure
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = open(f"/proc/{d}/environ", "rb").read()
        except OSError:
            continue
        if f"GPU_R4_JOB={token}".encode() in env.split(b"\0"):
            try:
                os.kill(int(d), signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def underscored(arg):
    """torchrun's own spelling of an option: --nproc-per-node -> --nproc_per_node (torch 1.13 knows only it)."""
    return "--" + arg[2:].replace("-", "_") if arg.startswith("--") else arg


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

def iso(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def events(path):
    out = []
    try:
        for ln in open(path):
            try:
                e = json.loads(ln)
                e["t"] = iso(e["ts"])
                out.append(e)
            except (ValueError, KeyError):
                pass
    except OSError:
        pass
    return out


RECVMSG = {"x86_64": "47", "aarch64": "212"}.get(os.uname().machine, "47")


def pool_ready(token, workers):
    """How many of the job's pool processes (not its current workers) are ready: blocked in recvmsg on their
    control socket, waiting for a worker (trun reads their "ready" only when a start needs them)."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in workers:
            continue
        try:
            if b"trun-warm-pool" not in open(f"/proc/{d}/cmdline", "rb").read():
                continue
            if f"GPU_R4_JOB={token}".encode() not in open(f"/proc/{d}/environ", "rb").read().split(b"\0"):
                continue
            n += open(f"/proc/{d}/syscall").read().split(" ", 1)[0] == RECVMSG
        except OSError:
            continue
    return n


def torchrun_cmd():
    """torch 2.x: python -m torch.distributed.run; Debian's torch 1.13 (the CPU box) needs the tests' wrapper."""
    try:
        v = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                           timeout=120).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        v = ""
    wrapper = os.path.join(REPO, "tests", "tools", "torchrun113.py")
    return [PY, wrapper] if v.startswith("1.13") and os.path.exists(wrapper) else [PY, "-m", "torch.distributed.run"]


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
    tl = {"replacements_started_warm": sum(1 for x in rs if x["preloaded"])}
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
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", NCCL_NVLS_ENABLE="0", PYTHON_EXEC=PY,
               TRUN_LOG_LEVEL="debug", GPU_R4_JOB=token, **extra_env)
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
                    log(f"recovery {name:32s} crash {k}: {secs:.3f} s  {json.dumps(tl)}")
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
        for f in ("launcher.err", "launcher.out", "events.jsonl"):
            src = os.path.join(d, f)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(LOGS, f"{name}-{f}"))
        shutil.rmtree(d, ignore_errors=True)
    return {"config": name, "cmd": " ".join(base), "env": extra_env, "runs": runs,
            "median_s": round(statistics.median(r["seconds"] for r in runs), 3) if runs else None,
            "notes": notes, "pool_import_waits": waits if warm else None, "wall_s": round(time.time() - start, 1)}


def configs():
    warm, cuda = [TRUN, "--warm-start"], [TRUN, "--warm-start", "--warm-start-cuda"]
    out = [("trun-cold", [TRUN], {}, False), ("trun-warm", warm, {}, True), ("trun-warm-cuda", cuda, {}, True),
           ("trun-warm-cuda+runtime_connect0", cuda, {"NCCL_RUNTIME_CONNECT": "0"}, True),
           ("trun-warm-cuda+cumem0", cuda, {"NCCL_CUMEM_ENABLE": "0"}, True),
           ("trun-warm-cuda+ifname_lo", cuda, {"NCCL_SOCKET_IFNAME": "lo"}, True),
           ("trun-warm+cumem0", warm, {"NCCL_CUMEM_ENABLE": "0"}, True),
           ("torchrun", TORCHRUN, {}, False)]
    only = os.environ.get("GPU_R4_CONFIGS")
    if only:
        keep = only.split(",")
        out = [c for c in out if c[0] in keep]
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
        row = recovery_job(name, base, extra, n, crashes, warm)
        table.append(row)
        log(f"recovery {name}: median {row['median_s']} s over {len(row['runs'])} crash(es); job {row['wall_s']} s"
            + (f"; notes: {row['notes']}" if row["notes"] else ""))
        save()


def main():
    global TORCHRUN
    TORCHRUN = torchrun_cmd()
    os.makedirs(LOGS, exist_ok=True)
    open(os.path.join(LOGS, "run.log"), "w").close()
    n = gpus()
    if BACKEND == "nccl" and n == 0:
        log("no GPU visible: run with GPU_R4_BACKEND=gloo to try the script on a CPU box")
        sys.exit(2)
    n = n or 2
    try:
        import torch
        tv = torch.__version__
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if BACKEND == "nccl" else []
    except Exception as e:  # noqa: BLE001
        tv, names = f"no torch: {e}", []
    res.update({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "torch": tv,
                "gpus": names, "nproc": n, "backend": BACKEND, "cpus": os.cpu_count(), "budget_s": BUDGET,
                "crashes_per_job": CRASHES, "trun": subprocess.run([TRUN, "--version"], capture_output=True,
                                                                   text=True).stdout.strip()})
    log(f"{n} workers, backend {BACKEND}, torch {tv}, {len(names)} GPU(s) {names[:1]}, budget {BUDGET:.0f} s")
    save()
    for step in (lambda: launch(n, len(names)), lambda: recovery(n)):
        try:
            step()
        except Exception as e:  # noqa: BLE001
            import traceback
            res["errors"].append(traceback.format_exc()[-1500:])
            log(f"step failed: {e}")
        save()
    log(f"results: {save()} (logs in {LOGS}); {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()

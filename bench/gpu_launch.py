"""Launch on a GPU box (issue 39 item 2), self-explaining, in ~60 s: N no-op workers (/bin/true, N = every GPU),
trun vs torchrun, --nproc-per-node N and gpu, median of GPU_LAUNCH_REPS (5) interleaved rounds.

trun runs in three states of its per-boot GPU cache (docs/nccl-efa.md): warm (the file is there: no NVML before
the workers start), cold (the file removed before each launch: NVML discovers, and the file is written: the first
launch after a boot) and --gpu-cache off (NVML at every launch, the old path). Then, for each, one launch at
TRUN_LOG_LEVEL=debug whose lines (stamped @<unix time>) give the phases from the launch's start: process start to
the first line, node discovery (and how long NVML took in it), the health gate, the store, the workers' start, the
end. And NVML on its own, in a child: nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlShutdown, and the whole discovery
(trun-topo --json), so that the driver's share (nvmlInit initialising the GPUs when no process holds them, without
nvidia-persistenced) is told apart from trun's.

This process never touches the GPUs (no torch import, GPUs counted from /proc/driver/nvidia/gpus), so that it
does not keep them initialised for the launches it measures.

Run on the GPU box (build/portable carried):  python3 bench/gpu_launch.py
Env: TRUN_BIN (default build/portable), PYTHON (torchrun's interpreter, default this one), OUT (default
build/gpu-results), GPU_LAUNCH_REPS (5), GPU_LAUNCH_BUDGET (seconds, default 80: torchrun rounds that would not
fit are skipped and said). Writes $OUT/<date>-gpu-launch.json and $OUT/gpu-launch-logs/.
"""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
TRUN = os.path.join(BIN, "trun")
TOPO = os.path.join(BIN, "trun-topo")
PY = os.environ.get("PYTHON", sys.executable)
OUT = os.environ.get("OUT") or os.path.join(REPO, "build", "gpu-results")
LOGS = os.path.join(OUT, "gpu-launch-logs")
REPS = int(os.environ.get("GPU_LAUNCH_REPS", "5"))
BUDGET = float(os.environ.get("GPU_LAUNCH_BUDGET", "80"))
T0 = time.time()
res = {"steps": {}, "errors": []}


def log(msg):
    line = f"[{time.time() - T0:6.1f}s] {msg}"
    print(line, flush=True)
    with open(os.path.join(LOGS, "run.log"), "a") as f:
        f.write(line + "\n")


def save():
    day = datetime.date.today().isoformat()
    with open(os.path.join(OUT, f"{day}-gpu-launch.json"), "w") as f:
        json.dump(res, f, indent=1)


def proc_gpus():
    try:  # TRUN_PROC_ROOT: trun's own test hook, for a try of this script with the fake NVML on a CPU box
        return sorted(os.listdir(os.path.join(os.environ.get("TRUN_PROC_ROOT") or "/proc", "driver/nvidia/gpus")))
    except OSError:
        return []


NVML_PROBE = r'''
import ctypes, json, os, time
t = time.perf_counter()
lib = ctypes.CDLL(os.environ.get("TRUN_NVML_LIBRARY") or "libnvidia-ml.so.1")
t_dl = time.perf_counter()
rc = lib.nvmlInit_v2()
t_init = time.perf_counter()
n = ctypes.c_uint(0)
rc2 = lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
t_count = time.perf_counter()
lib.nvmlShutdown()
t_end = time.perf_counter()
print(json.dumps({"dlopen_ms": (t_dl - t) * 1e3, "init_ms": (t_init - t_dl) * 1e3, "init_rc": rc,
                  "count_ms": (t_count - t_init) * 1e3, "count": n.value, "count_rc": rc2,
                  "shutdown_ms": (t_end - t_count) * 1e3}))
'''


def nvml_alone():
    """NVML in a child (this process holds nothing): 3 times nvmlInit/Count/Shutdown, then trun-topo 3 times."""
    out = {"probe": [], "topo_ms": []}
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", NVML_PROBE], capture_output=True, text=True, timeout=60)
        try:
            out["probe"].append(json.loads(r.stdout))
        except ValueError:
            out["probe"].append({"error": (r.stdout + r.stderr)[-300:]})
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run([TOPO, "--json", "--no-imds"], capture_output=True, text=True, timeout=60)
        out["topo_ms"].append(round((time.perf_counter() - t) * 1e3, 1))
        if r.returncode != 0:
            out.setdefault("topo_errors", []).append(r.stderr[-300:])
    inits = [p["init_ms"] for p in out["probe"] if "init_ms" in p]
    log("NVML alone (no process holds the GPUs): nvmlInit_v2 " + ", ".join(f"{x:.1f}" for x in inits) +
        " ms; GetCount " + ", ".join(f"{p.get('count_ms', 0):.2f}" for p in out["probe"]) +
        " ms; Shutdown " + ", ".join(f"{p.get('shutdown_ms', 0):.1f}" for p in out["probe"]) +
        " ms; trun-topo --json (whole discovery, process included) " + ", ".join(map(str, out["topo_ms"])) + " ms")
    res["steps"]["nvml"] = out
    save()


def underscored(arg):
    return "--" + arg[2:].replace("-", "_") if arg.startswith("--") else arg


def torchrun_cmd():
    """torch 2.x: python -m torch.distributed.run; Debian's torch 1.13 (the CPU box) needs the tests' wrapper."""
    try:
        v = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                           timeout=120).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        v = ""
    wrapper = os.path.join(REPO, "tests", "tools", "torchrun113.py")
    return [PY, wrapper] if v.startswith("1.13") and os.path.exists(wrapper) else [PY, "-m", "torch.distributed.run"]


def timed(cmd, env, timeout=120):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return r.returncode, time.perf_counter() - t, r.stderr


PHASES = [  # (name, regex of the debug line that ends it)
    ("process start, configuration and node discovery", r"node discovery: "),
    ("plan (environment, run directory) and the health gate",
     r"health: (the GPUs came from the GPU cache|\d+ check\(s\) in .*checks only)"),
    ("store up", r"serving the store on port"),
    ("workers started", r"round 0: started \d+ workers"),
]


def breakdown(tag, cmd, env):
    denv = dict(env, TRUN_LOG_LEVEL="debug")
    t = time.time()
    r = subprocess.run(cmd, env=denv, capture_output=True, text=True, timeout=60)
    end = time.time()
    lines, stamps = [], []
    for ln in r.stderr.splitlines():
        m = re.search(r"@(\d+\.\d+)\)$", ln)
        at = (float(m.group(1)) - t) * 1000 if m else None
        if at is not None:
            stamps.append((at, ln))
        lines.append((f"+{at:7.1f} ms  " if at is not None else " " * 14) + ln)
    lines.append(f"+{(end - t) * 1000:7.1f} ms  trun exited {r.returncode}")
    with open(os.path.join(LOGS, f"launch-debug-{tag.replace('/', '-')}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    phases, prev = [], 0.0
    for name, rx in PHASES:
        hit = next((at for at, ln in stamps if re.search(rx, ln)), None)
        if hit is not None:
            phases.append((name, round(hit - prev, 1)))
            prev = hit
    phases.append(("workers' run and the end", round((end - t) * 1000 - prev, 1)))
    nv = next((ln for _, ln in stamps if "node discovery:" in ln), "")
    m = re.search(r"in ([\d.]+) ms", nv)
    bg = next((ln for _, ln in stamps if "read in the background in" in ln), "")
    mb = re.search(r"in ([\d.]+) ms", bg)
    row = {"phases_ms": phases, "discovery_ms": float(m.group(1)) if m else None,
           "background_gpu_facts_ms": float(mb.group(1)) if mb else None, "total_ms": round((end - t) * 1000, 1),
           "discovery_line": re.sub(r" \([^()]*@[\d.]+\)$", "", nv)}
    log(f"breakdown {tag}: " + "; ".join(f"{n} {v} ms" for n, v in phases) + f" (total {row['total_ms']} ms)")
    log(f"    of which discovery {row['discovery_ms']} ms: {row['discovery_line'].strip()}" +
        (f"; GPU facts read in the background in {row['background_gpu_facts_ms']} ms" if mb else ""))
    return row


def main():
    os.makedirs(LOGS, exist_ok=True)
    open(os.path.join(LOGS, "run.log"), "w").close()
    gpus = proc_gpus()
    n = len(gpus)
    if n == 0:
        log("no GPU in /proc/driver/nvidia/gpus: this bench is for a GPU box")
        sys.exit(2)
    runtime = tempfile.mkdtemp(prefix="trun-launch-")  # the cache's directory, ours alone (mode 0700)
    cache = os.path.join(runtime, "trun", "gpus.cache")
    try:
        persist = subprocess.run(["nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as e:
        persist = [f"unknown ({e})"]
    res.update({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpus": n,
                "cpus": os.cpu_count(), "persistence_mode": persist, "reps": REPS, "kernel": os.uname().release,
                "trun": subprocess.run([TRUN, "--version"], capture_output=True, text=True).stdout.strip()})
    log(f"{n} GPU(s) {gpus}, {os.cpu_count()} CPUs, persistence mode {persist}, trun {res['trun']}")
    nvml_alone()
    tr = torchrun_cmd()
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", XDG_RUNTIME_DIR=runtime)
    cmds = {}
    for tag, spec in (("n", str(n)), ("gpu", "gpu")):
        common = ["--standalone", "--nproc-per-node", spec, "--monitor-interval", "0.1", "--no-python", "/bin/true"]
        cmds[f"trun-warm/{tag}"] = [TRUN] + common
        cmds[f"trun-cold/{tag}"] = [TRUN] + common
        cmds[f"trun-cache-off/{tag}"] = [TRUN, "--gpu-cache", "off"] + common
        cmds[f"torchrun/{tag}"] = tr + [underscored(c) for c in common]
    samples = {k: [] for k in cmds}
    torchrun_s = 5.0
    for rep in range(REPS):
        for name, cmd in cmds.items():
            if name.startswith("torchrun") and time.time() - T0 + torchrun_s > BUDGET:
                log(f"skipped {name} round {rep}: the budget ({BUDGET:.0f} s) is spent")
                continue
            if name.startswith("trun-cold") and os.path.exists(cache):
                os.unlink(cache)
            rc, wall, err = timed(cmd, env)
            if rc != 0:
                log(f"{name}: exit {rc}: {err[-300:]}")
                res["errors"].append(f"{name}: exit {rc}: {err[-300:]}")
                continue
            if name.startswith("torchrun"):
                torchrun_s = max(torchrun_s, wall)
            samples[name].append(wall)
    table = []
    for name, s in samples.items():
        if s:
            row = {"launcher": name.split("/")[0], "nproc": name.split("/")[1],
                   "median_ms": round(statistics.median(s) * 1000, 1), "runs_ms": [round(x * 1000, 1) for x in s]}
            table.append(row)
            log(f"launch {name:22s} {row['median_ms']:8.1f} ms  {row['runs_ms']}")
    res["steps"]["launch"] = table
    speed = {}
    for tag in ("n", "gpu"):
        tr = samples.get(f"torchrun/{tag}")
        for kind in ("trun-warm", "trun-cold", "trun-cache-off"):
            s = samples.get(f"{kind}/{tag}")
            if tr and s:
                speed[f"{kind}/{tag}"] = round(statistics.median(tr) / statistics.median(s), 1)
    res["speedup_vs_torchrun"] = speed
    log("speed-up over torchrun (median / median): " + ", ".join(f"{k} {v}x" for k, v in speed.items()))
    save()
    bd = {}
    for tag in ("n", "gpu"):
        for kind in ("trun-cold", "trun-warm", "trun-cache-off"):
            if kind == "trun-cold" and os.path.exists(cache):
                os.unlink(cache)
            bd[f"{kind}/{tag}"] = breakdown(f"{kind}/{tag}", cmds[f"{kind}/{tag}"], env)
    # The health gate's GPU facts, read in the background on a warm launch: a job long enough to see them end.
    r = subprocess.run([TRUN, "--standalone", "--nproc-per-node", str(n), "--no-python", "/bin/sleep", "1"],
                       env=dict(env, TRUN_LOG_LEVEL="debug"), capture_output=True, text=True, timeout=60)
    bg = [re.sub(r" \([^()]*@[\d.]+\)$", "", ln) for ln in r.stderr.splitlines()
          if "in the background" in ln or "GPU cache: NVML" in ln]
    log("warm launch of 1 s workers, the gate in the background:\n    " + "\n    ".join(bg or ["(no line)"]))
    bd["background_gate"] = bg
    res["steps"]["breakdown"] = bd
    save()
    log(f"done in {time.time() - T0:.1f} s; {OUT}")


if __name__ == "__main__":
    main()

"""What the GPU-box scripts share (bench/gpu_recovery4.py, bench/gpu_nodeloss.py, bench/gpu.py): the result
folder's name, a JSON saved after every measurement, a time budget with skipped steps listed, the launchers'
command lines, and how a job's processes are found and stopped.

Every process a script starts carries GPU_BENCH_JOB=<token> in its environment: the pool processes and workers
of a launcher lead sessions of their own, so a launcher's process group alone does not reach them.
"""
import datetime
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable"))
TRUN = os.path.join(BIN, "trun")
PY = os.environ.get("PYTHON", sys.executable)
JOB_VAR = "GPU_BENCH_JOB"
RECVMSG = {"x86_64": "47", "aarch64": "212"}.get(os.uname().machine, "47")



# The start of a bench worker (bench/gpu_nodeloss.py, bench/gpu_recovery4.py; argv: its folder, the backend):
# its clocks from the script's start to its first all-reduce (t0, import, cuda, pg, ready), whether the
# --warm-start pool had imported torch (preloaded), and its ranks; each script appends what it does next.
WORKER_READY = r'''
import json, os, sys, time
t0 = time.time()
preloaded = "torch" in sys.modules
d, backend = sys.argv[1], sys.argv[2]
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
assert int(x.item()) == world, x'''

def nvls_off():
    """NVLink multicast stays off on the shared GPU box, in every process the scripts start."""
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1"),
                 ("PYTHONUNBUFFERED", "1")):
        os.environ.setdefault(k, v)
    os.environ["NCCL_NVLS_ENABLE"] = "0"


def exit_on_term():
    """SIGTERM (bench/gpu4.sh's time limit) ends the script through SystemExit: its finally blocks stop the job
    in hand and the JSON keeps what was measured."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))


def gpu_names():
    """Each visible GPU's name as nvidia-smi prints it; [] where there is no nvidia-smi or no GPU."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()] if r.returncode == 0 else []
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and names and all(x.strip().isdigit() for x in cvd.split(",") if x.strip()):
        names = [names[int(x)] for x in cvd.split(",") if x.strip() and int(x) < len(names)]
    return names


def gpu_tag(names):
    """'NVIDIA H200' twice -> 'h200x2', 'NVIDIA A100-SXM4-80GB' -> 'a100x1',
    'NVIDIA GeForce RTX 4090' -> 'rtx4090x1', no GPU -> 'nogpu'."""
    if not names:
        return "nogpu"
    tag = []
    for w in names[0].split():
        if w.lower() in ("nvidia", "tesla", "geforce", "quadro"):
            continue
        tag.append(re.sub(r"[^a-z0-9]", "", w.split("-")[0].lower()))
        if any(ch.isdigit() for ch in w):
            break
    return "".join(tag) + f"x{len(names)}"


def step_dir(step, out=None):
    """$OUT/<date>-<gpu tag>-<step>/, as bench/results/ holds them (created)."""
    out = out or os.environ.get("OUT") or os.path.join(REPO, "build", "gpu-results")
    d = os.path.join(out, f"{datetime.date.today().isoformat()}-{gpu_tag(gpu_names())}-{step}")
    os.makedirs(d, exist_ok=True)
    return d


class Results:
    """One step's results: <dir>/<step>.json rewritten after every measurement (a killed run keeps what it
    measured), run.log with every line, a budget in seconds from the start; the console gets the short lines."""

    def __init__(self, step, budget, out=None):
        self.dir = step_dir(step, out)
        self.path = os.path.join(self.dir, f"{step}.json")
        self.t0 = time.time()
        self.budget = budget
        self.res = {"step": step, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "budget_s": budget, "steps": {}, "skipped": [], "errors": []}
        open(os.path.join(self.dir, "run.log"), "w").close()

    def log(self, msg, console=True):
        if console:
            print(f"[{time.time() - self.t0:5.0f}s] {msg}", flush=True)
        with open(os.path.join(self.dir, "run.log"), "a") as f:
            f.write(f"[{time.time() - self.t0:7.1f}s] {msg}\n")

    def left(self):
        return self.budget - (time.time() - self.t0)

    def save(self):
        self.res["elapsed_s"] = round(time.time() - self.t0, 1)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.res, f, indent=1)
        os.replace(tmp, self.path)
        return self.path

    def skip(self, what, need, console=True):
        """True (and listed) when `what`, needing about `need` seconds, no longer fits the budget."""
        if self.left() >= need:
            return False
        why = f"{what}: skipped, {self.left():.0f} s of the budget left, it needs about {need:.0f} s"
        self.res["skipped"].append(why)
        self.log(why, console)
        self.save()
        return True

    def error(self, what):
        self.res["errors"].append(what[-1500:])
        self.log(what.splitlines()[-1][:300] if what.strip() else what)
        self.save()


def job_pids(token, also=None):
    """Every process whose environment carries this job's token (and the VAR=VALUE `also`, when given)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            env = open(f"/proc/{d}/environ", "rb").read()
        except OSError:
            continue
        env = env.split(b"\0")
        if f"{JOB_VAR}={token}".encode() in env and (also is None or also.encode() in env):
            out.append(int(d))
    return out


def kill_token(token):
    for pid in job_pids(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def killtree(procs, token):
    """Stops launchers: SIGTERM to each one's group (it stops its workers), then SIGKILL to the groups and to
    every process that carries the job's token (workers and pool processes lead sessions of their own;
    stopped processes too: SIGKILL ends them)."""
    procs = procs if isinstance(procs, list) else [procs]
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGCONT)
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.time() + 10
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kill_token(token)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def tree(pid):
    """pid and every descendant (from /proc)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        pending += kids.get(p, [])
    return out


def iso(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def events(path):
    """trun's --events file: each event with its time as "t" (unix seconds)."""
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


def pool_ready(token, exclude=()):
    """How many of the job's --warm-start pool processes (not the pids in exclude) are ready: blocked in
    recvmsg on their control socket, waiting for a worker (trun reads their "ready" only when a start needs
    them)."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in exclude:
            continue
        try:
            if b"trun-warm-pool" not in open(f"/proc/{d}/cmdline", "rb").read():
                continue
            if f"{JOB_VAR}={token}".encode() not in open(f"/proc/{d}/environ", "rb").read().split(b"\0"):
                continue
            n += open(f"/proc/{d}/syscall").read().split(" ", 1)[0] == RECVMSG
        except OSError:
            continue
    return n


def wait_pool(token, want, exclude=(), cap=60.0):
    """Waits until `want` pool processes are ready (at most cap seconds); how many are."""
    end = time.time() + cap
    while pool_ready(token, exclude) < want and time.time() < end:
        time.sleep(0.1)
    return pool_ready(token, exclude)


def torch_version(py=PY):
    try:
        return subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                              timeout=120).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.lru_cache(maxsize=None)
def torchrun_cmd(py=PY):
    """torch 2.x: python -m torch.distributed.run; Debian's torch 1.13 (the CPU box) needs the tests' wrapper. A
    tuple (asked once: torch's import takes seconds)."""
    wrapper = os.path.join(REPO, "tests", "tools", "torchrun113.py")
    if torch_version(py).startswith("1.13") and os.path.exists(wrapper):
        return (py, wrapper)
    return (py, "-m", "torch.distributed.run")


def underscored(arg):
    """torchrun's own spelling of an option: --nproc-per-node -> --nproc_per_node (torch 1.13 knows only it)."""
    return "--" + arg[2:].replace("-", "_") if arg.startswith("--") else arg


def torchrun_args(args):
    return [underscored(a) for a in args]


def free_port():
    """A loopback port free now and below the kernel's ephemeral range: a port bind(0) hands out can be taken by
    any socket of an earlier job's processes (NCCL opens many) before the store listens on it (seen on the GPU box:
    'address already in use', a whole configuration lost)."""
    import random
    import socket
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        p = random.randrange(20000, max(20001, min(low, 32768)))
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def box(res, backend):
    """The box's facts into res: torch, GPUs, CPUs, trun's version, nvidia-smi topo -m (into the step's dir)."""
    try:
        import torch
        tv = torch.__version__
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if backend == "nccl" else []
    except Exception as e:  # noqa: BLE001
        tv, names = f"no torch: {e}", []
    res.res.update({"torch": tv, "gpus": names, "backend": backend, "cpus": os.cpu_count(),
                    "trun": subprocess.run([TRUN, "--version"], capture_output=True, text=True).stdout.strip()})
    try:
        r = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=60)
        open(os.path.join(res.dir, "nvidia-smi-topo.txt"), "w").write(r.stdout + r.stderr)
    except (OSError, subprocess.TimeoutExpired) as e:
        open(os.path.join(res.dir, "nvidia-smi-topo.txt"), "w").write(f"nvidia-smi topo -m: {e!r}\n")
    return names


def ar_lines(text):
    """examples/allreduce_nccl.py's "AR n=.. bytes=.. time_us=.. busbw=.. GB/s" lines: {bytes: {busbw, time_us}}."""
    out = {}
    for ln in text.splitlines():
        if ln.startswith("AR ") and "bytes=" in ln:
            kv = dict(x.split("=", 1) for x in ln.split() if "=" in x)
            out[int(kv["bytes"])] = {"busbw": float(kv["busbw"]), "time_us": float(kv["time_us"])}
    return out

"""trun's CPU benchmarks, side by side with torch 1.13 (host) and torch 2.6 (chroot).

Contenders run interleaved (A B C A B C ...) so that drift on the machine hits them alike; each table cell
is the median of the repetitions and every comparison is a ratio measured in this one run.
Writes bench/results/<date>-cpu.json and prints the tables. Run through `make bench`.

Usage: bench.py [--reps N] [--quick] [--only store|conns|launch|restart|warm|rdzv|recovery|spare] [--out-dir DIR]
--quick (`BENCH_QUICK=1 make bench`): every benchmark once at its smallest size, to check the whole chain
(bench.py -> JSON -> plots.py -> readme.py) in about a minute; bench/run.sh sends it to build/bench-quick/.
The recovery benchmark (bench/recovery.py: a node lost from a job of 3, crash and silent, trun's two elastic
backends against torchrun 1.13) needs root for its network namespaces; --quick times trun's crash case once.
So does the spare benchmark (bench/spare.py, issue 30: a spare of a job of 3 taking a lost node's place).
"""
import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
HOST_PY = os.environ.get("TRUN_HOST_PY", "/usr/bin/python3")
CHROOT_RUN = [os.path.join(REPO, "scripts", "chroot-run.sh")]
CHROOT = os.environ.get("TRUN_CHROOT", "/var/cache/trun/trixie")
HAVE_CHROOT = os.path.exists(os.path.join(CHROOT, ".trun-ready"))
TORCHRUN113 = [HOST_PY, os.path.join(REPO, "tests", "tools", "torchrun113.py")]

SERVER_PY = r"""
import datetime, sys, time, torch.distributed as dist
kw = {} if sys.argv[1] == "1.13" else {"use_libuv": False}
s = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=3600), wait_for_workers=False, **kw)
print(s.port, flush=True)
time.sleep(1e9)
"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Server:
    """A TCPStore server process: trun-store, or torch's own (1.13 host / 2.6 chroot)."""

    def __init__(self, kind):
        self.kind = kind
        if kind == "trun":
            fd, ready = tempfile.mkstemp(prefix="trun-bench-port.")
            os.close(fd)
            os.unlink(ready)
            self.proc = subprocess.Popen([os.path.join(BUILD, "trun-store"), "serve", "--port", "0",
                                          "--ready-file", ready], stdout=subprocess.DEVNULL,
                                         start_new_session=True)
            for _ in range(500):
                if os.path.exists(ready):
                    break
                time.sleep(0.01)
            self.port = int(open(ready).read())
            os.unlink(ready)
            self.pid = self.proc.pid
        else:
            cmd = [HOST_PY, "-c", SERVER_PY, "1.13"] if kind == "torch-1.13" else \
                CHROOT_RUN + ["python3", "-c", SERVER_PY, "2.6"]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
            self.port = int(self.proc.stdout.readline())
            self.pid = self.find_pid()
        self.gen = "1.13" if kind == "torch-1.13" else "v2"

    def find_pid(self):
        """The python process that serves (the chroot wrapper execs down to it)."""
        return self.proc.pid

    def rss_kb(self):
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return -1

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def store_bench(reps, quick):
    kinds = ["trun", "torch-1.13"] + (["torch-2.6"] if HAVE_CHROOT else [])
    clients = [1] if quick else [1, 64, 1024]
    requests = {1: 2000} if quick else {1: 20000, 64: 100000, 1024: 200000}
    rows = {}
    for c in clients:
        for rep in range(reps):
            for kind in kinds:
                srv = Server(kind)
                try:
                    gens = [srv.gen]
                    out = subprocess.run([os.path.join(BUILD, "trun-store"), "bench", "--target",
                                          f"127.0.0.1:{srv.port}", "--gen", gens[0], "--clients", str(c),
                                          "--requests", str(requests[c])],
                                         capture_output=True, text=True, timeout=600)
                finally:
                    srv.stop()
                if out.returncode != 0:
                    log(f"store bench {kind} clients={c}: failed: {out.stderr.strip()[-300:]}")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.setdefault((kind, c), []).append(r)
                log(f"store {kind:10s} clients={c:5d} rep={rep}: {r['ops_per_sec']:.0f} ops/s p99 {r['p99_us']:.0f} us")
    table = []
    for c in clients:
        for kind in kinds:
            rs = rows.get((kind, c), [])
            if not rs:
                continue
            table.append({"server": kind, "clients": c,
                          "ops_per_sec": statistics.median(r["ops_per_sec"] for r in rs),
                          "p50_us": statistics.median(r["p50_us"] for r in rs),
                          "p99_us": statistics.median(r["p99_us"] for r in rs),
                          "p999_us": statistics.median(r["p999_us"] for r in rs),
                          "reps": len(rs)})
    return table


def conns_bench(count):
    """Memory of a server holding `count` idle connections, each with a pending WAIT."""
    res = []
    for kind in ["trun", "torch-1.13"]:
        srv = Server(kind)
        try:
            base = srv.rss_kb()
            out = subprocess.run([HOST_PY, os.path.join(REPO, "bench", "hold_conns.py"), str(srv.port),
                                  str(count), srv.gen, str(srv.pid)], capture_output=True, text=True,
                                 timeout=600)
            if out.returncode != 0:
                log(f"conns {kind}: failed: {out.stderr.strip()[-400:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update({"server": kind, "rss_before_kb": base})
            res.append(r)
            log(f"conns {kind}: {count} connections with a pending WAIT: RSS {r['rss_held_kb'] / 1024:.1f} MiB "
                f"(before {base / 1024:.1f} MiB), all released: {r['released']}")
        finally:
            srv.stop()
    return res


def peak_rss_kb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def run_launcher(cmd, env):
    """Wall time launch-to-exit and the launcher process's own peak RSS (sampled until it exits)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = -1
    while p.poll() is None:
        v = peak_rss_kb(p.pid)
        peak = max(peak, v)
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    err = p.stderr.read()
    return p.returncode, wall, peak, err


def launchers(nproc, extra):
    trun = [os.path.join(BUILD, "trun")]
    # torchrun 1.13 polls its workers every 5 s by default; give every launcher the newest default, 0.1 s.
    common = ["--standalone", "--nproc_per_node", str(nproc), "--monitor_interval", "0.1"] + extra
    out = {"trun": trun + common, "torchrun-1.13": TORCHRUN113 + common}
    if HAVE_CHROOT:
        # The chroot wrapper execs down to python, so the sampled process is torchrun itself.
        out["torchrun-2.6"] = CHROOT_RUN + ["--keep-env", "python3", "-m", "torch.distributed.run"] + common
    return out


def launch_bench(reps, sizes=(2, 8)):
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR")
    table = []
    for nproc in sizes:
        samples = {}
        for rep in range(reps):
            for name, cmd in launchers(nproc, ["--no_python", "/bin/true"]).items():
                rc, wall, peak, err = run_launcher(cmd, env)
                if rc != 0:
                    log(f"launch {name} nproc={nproc}: exit {rc}: {err.strip()[-300:]}")
                    continue
                samples.setdefault(name, []).append((wall, peak))
                log(f"launch {name:14s} nproc={nproc} rep={rep}: {wall * 1000:.1f} ms, peak RSS {peak / 1024:.1f} MiB")
        for name, s in samples.items():
            table.append({"launcher": name, "nproc": nproc, "workers": "/bin/true (no-op)",
                          "wall_ms": statistics.median(w for w, _ in s) * 1000,
                          "peak_rss_mib": statistics.median(p for _, p in s) / 1024, "reps": len(s)})
    return table


RESTART_WORKER = r"""
import os, sys, time
d = sys.argv[1]
n = os.environ["TORCHELASTIC_RESTART_COUNT"]
lr = os.environ["LOCAL_RANK"]
if n == "0":
    if lr == "0":
        open(os.path.join(d, "crash"), "w").write(repr(time.time()))
        os._exit(1)
    time.sleep(60)
else:
    if lr == "0":
        open(os.path.join(d, "start"), "w").write(repr(time.time()))
"""


def restart_bench(reps):
    """Worker crash (its last instant) to the replacement's first Python statement."""
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", PYTHON_EXEC=HOST_PY)
    table = []
    samples = {}
    names = ["trun", "torchrun-1.13"] + (["torchrun-2.6"] if HAVE_CHROOT else [])
    for rep in range(reps):
        for name in names:
            with tempfile.TemporaryDirectory(prefix="trun-bench-restart.", dir="/tmp") as d:
                script = os.path.join(d, "w.py")
                open(script, "w").write(RESTART_WORKER)
                py = HOST_PY
                if name == "trun":
                    base = [os.path.join(BUILD, "trun")]
                elif name == "torchrun-1.13":
                    base = TORCHRUN113
                else:  # inside the chroot, which shares /tmp with the host
                    base = CHROOT_RUN + ["--keep-env", "python3", "-m", "torch.distributed.run"]
                    py = "python3"
                # torchrun 1.13's default monitor interval is 5 s; give every launcher the newest default, 0.1 s.
                cmd = base + ["--standalone", "--nproc_per_node", "2", "--max_restarts", "1",
                              "--monitor_interval", "0.1", "--no_python", py, script, d]
                rc, wall, _, err = run_launcher(cmd, env)
                try:
                    lat = float(open(os.path.join(d, "start")).read()) - float(open(os.path.join(d, "crash")).read())
                except OSError:
                    log(f"restart {name}: no measurement (exit {rc}): {err.strip()[-300:]}")
                    continue
                samples.setdefault(name, []).append(lat)
                log(f"restart {name:14s} rep={rep}: crash to replacement {lat * 1000:.1f} ms")
    for name, s in samples.items():
        table.append({"launcher": name, "crash_to_restart_ms": statistics.median(s) * 1000, "reps": len(s),
                      "note": "2 workers; the other worker sleeps, so the teardown sends it SIGTERM"})
    return table


WARM_WORKER = r"""
import os, sys, time
t_start = time.time()
d = sys.argv[1]
n = os.environ["TORCHELASTIC_RESTART_COUNT"]
lr = os.environ["LOCAL_RANK"]
import torch, torch.distributed as dist
if os.environ.get("WARM_CUDA") == "1":  # bench/gpu_warm.py: CUDA set up as part of being ready
    torch.ones(1, device="cuda").sum().item()
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == int(os.environ["WORLD_SIZE"])
if n == "0":
    time.sleep(float(sys.argv[2]))  # the job runs a while: --warm-start refills its pool meanwhile
    if lr == "1":
        open(os.path.join(d, "crash"), "w").write(repr(time.time()))
        os._exit(1)
    time.sleep(60)
else:
    open(os.path.join(d, "ready." + lr), "w").write("%r %r" % (time.time(), t_start))
    dist.barrier()
"""


def warm_bench(reps, settle=6.0, names=None, py=HOST_PY, trun=os.path.join(BUILD, "trun"), extra_env=None):
    """Issue 31: a worker's crash until every replacement has imported torch, formed its gloo group and done one
    all-reduce (2 workers, rank 1 crashes `settle` s after the first all-reduce): trun cold, trun --warm-start,
    torchrun 1.13 (names: other launchers, e.g. on the GPU box); plus the pool's resident memory per worker
    (trun --explain --warm-start)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", PYTHON_EXEC=py, **(extra_env or {}))
    names = names or {"trun": [trun], "trun-warm": [trun, "--warm-start"], "torchrun-1.13": TORCHRUN113}
    samples = {}
    for rep in range(reps):
        for name, base in names.items():
            with tempfile.TemporaryDirectory(prefix="trun-bench-warm.", dir="/tmp") as d:
                script = os.path.join(d, "w.py")
                open(script, "w").write(WARM_WORKER)
                cmd = base + ["--standalone", "--nproc_per_node", "2", "--max_restarts", "1",
                              "--monitor_interval", "0.1", script, d, str(settle)]
                rc, _, _, err = run_launcher(cmd, env)
                try:
                    crash = float(open(os.path.join(d, "crash")).read())
                    ready = [open(os.path.join(d, f"ready.{lr}")).read().split() for lr in (0, 1)]
                except OSError:
                    log(f"warm {name}: no measurement (exit {rc}): {err.strip()[-300:]}")
                    continue
                lat = max(float(r[0]) for r in ready) - crash
                start = max(float(r[1]) for r in ready) - crash
                samples.setdefault(name, []).append((lat, start))
                log(f"warm {name:14s} rep={rep}: crash to replacements ready {lat * 1000:.1f} ms "
                    f"(script running {start * 1000:.1f} ms)")
    table = []
    for name, s in samples.items():
        table.append({"launcher": name, "crash_to_ready_ms": statistics.median(x for x, _ in s) * 1000,
                      "crash_to_script_ms": statistics.median(y for _, y in s) * 1000, "reps": len(s),
                      "runs_ms": [round(x * 1000, 1) for x, _ in s],
                      "note": "2 workers, gloo; ready = imported torch, formed the group, one all-reduce"})
    p = subprocess.run([trun, "--explain", "--warm-start", "--nproc-per-node", "2"],
                       env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.strip().startswith("pool memory:"):
            table.append({"launcher": "trun-warm", "pool": line.strip()})
            log("warm " + line.strip())
    return table


def rdzv_run(mode, n, run_id, torch_timeout=600):
    """One rendezvous of n agents on a fresh trun-store; bytes = the server's read+written syscall bytes."""
    srv = Server("trun")
    try:
        io0 = proc_io(srv.pid)
        if mode.startswith("trun-"):
            # The series "trun-fast" (its name in every stored result) is the trun backend.
            cmd = [os.path.join(BUILD, "trun-rdzv-bench"), "--target", f"127.0.0.1:{srv.port}", "--agents", str(n),
                   "--mode", "trun" if mode == "trun-fast" else mode[5:], "--run-id", run_id]
        elif mode == "torchrun-1.13":
            cmd = [HOST_PY, os.path.join(REPO, "bench", "rdzv_torch.py"), "127.0.0.1", str(srv.port), str(n), run_id,
                   str(torch_timeout)]
        else:
            cmd = CHROOT_RUN + ["python3", "/trun/bench/rdzv_torch.py", "127.0.0.1", str(srv.port), str(n), run_id,
                                str(torch_timeout)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, preexec_fn=raise_nofile)
        if out.returncode != 0:
            why = out.stderr.strip()[-300:] or f"exit {out.returncode}"
            log(f"rdzv {mode} agents={n}: failed: {why}")
            RDZV_FAILED.append(f"{mode}, {n} agents: {why}")
            return None
        line = out.stdout.strip().splitlines()[-1]
        kv = dict(f.split("=", 1) for f in line.split()[1:])
        io1 = proc_io(srv.pid)
        return {"mode": mode, "agents": n, "seconds": float(kv["seconds"]), "total_seconds": float(kv["total_seconds"]),
                "store_bytes": io1 - io0}
    finally:
        srv.stop()


def proc_io(pid):
    d = {}
    for line in open(f"/proc/{pid}/io"):
        k, v = line.split(":")
        d[k] = int(v)
    return d["rchar"] + d["wchar"]


def raise_nofile():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


RDZV_FAILED = []
RDZV_SIZES = {"trun-fast": (8, 64, 256, 1000, 10000), "trun-c10d": (8, 64, 256),
              "torchrun-1.13": (8, 64, 256), "torchrun-2.6": (8, 64, 256)}
# torchrun at 256 agents ran past its default 600 s join timeout here (both versions): it gets 120 s and one run.
RDZV_TORCH_LIMIT = {256: 120}


def rdzv_tries(mode, n, reps):
    """Runs of one mode at one size: `reps` (3 by default), but torchrun only once where it hits its join timeout."""
    return 1 if mode.startswith("torchrun") and n in RDZV_TORCH_LIMIT else reps


def rdzv_bench(reps, sizes=(8, 64, 256, 1000, 10000)):
    """Wall time from the last agent's join to the last rank assigned, and the store's traffic, vs agents.

    Per size the modes run interleaved (A B C D A B C D ...); each row is the median of its runs."""
    table = []
    for n in sizes:
        modes = [m for m, ns in RDZV_SIZES.items()
                 if n in ns and (m != "torchrun-2.6" or HAVE_CHROOT)]
        tries = {m: rdzv_tries(m, n, reps) for m in modes}
        runs = {m: [] for m in modes}
        for i in range(max(tries.values(), default=0)):
            for m in modes:
                if i < tries[m]:
                    r = rdzv_run(m, n, f"b{n}-{i}", RDZV_TORCH_LIMIT.get(n, 600))
                    if r:
                        runs[m].append(r)
        for m in modes:
            rs = runs[m]
            if not rs:
                continue
            row = {"mode": m, "agents": n,
                   "seconds": statistics.median(r["seconds"] for r in rs),
                   "total_seconds": statistics.median(r["total_seconds"] for r in rs),
                   "store_bytes": int(statistics.median(r["store_bytes"] for r in rs)),
                   "runs_seconds": [r["seconds"] for r in rs], "reps": len(rs)}
            table.append(row)
            print(f"rdzv mode={m} agents={n} seconds={row['seconds']:.3f} store_bytes={row['store_bytes']}",
                  flush=True)
    return table


def ratio(a, b):
    return round(a / b, 2) if a and b else None


def summarize(res):
    lines = []
    st = res.get("store", [])
    if st:
        lines.append("TCPStore server, trun-store bench load (mix set=40,get=40,add=20), median of reps:")
        lines.append(f"{'server':12s} {'clients':>7s} {'ops/s':>10s} {'p50 us':>9s} {'p99 us':>9s} {'p99.9 us':>10s}")
        for r in st:
            lines.append(f"{r['server']:12s} {r['clients']:7d} {r['ops_per_sec']:10.0f} {r['p50_us']:9.0f} "
                         f"{r['p99_us']:9.0f} {r['p999_us']:10.0f}")
        by = {(r["server"], r["clients"]): r for r in st}
        for other in ("torch-1.13", "torch-2.6"):
            for c in (1, 64, 1024):
                t, o = by.get(("trun", c)), by.get((other, c))
                if t and o:
                    lines.append(f"ratio trun/{other} clients={c}: ops/s x{ratio(t['ops_per_sec'], o['ops_per_sec'])}, "
                                 f"p99 x{ratio(t['p99_us'], o['p99_us'])}, p99.9 x{ratio(t['p999_us'], o['p999_us'])}")
    for r in res.get("conns", []):
        lines.append(f"{r['server']}: {r['connections']} connections with a pending WAIT: RSS {r['rss_held_kb'] / 1024:.1f} MiB")
    rz = res.get("rdzv", [])
    if rz:
        lines.append("Rendezvous, last join to every rank assigned (median), and bytes through the store:")
        by = {(r["mode"], r["agents"]): r for r in rz}
        for r in rz:
            lines.append(f"rdzv mode={r['mode']} agents={r['agents']} seconds={r['seconds']:.3f} "
                         f"store_bytes={r['store_bytes']}")
        for n in (8, 64, 256):
            for other in ("torchrun-1.13", "torchrun-2.6"):
                for mine in ("trun-c10d", "trun-fast"):
                    t, o = by.get((mine, n)), by.get((other, n))
                    if t and o:
                        lines.append(f"ratio {other}/{mine} agents={n}: time x{ratio(o['seconds'], t['seconds'])}, "
                                     f"bytes x{ratio(o['store_bytes'], t['store_bytes'])}")
    la = res.get("launch", [])
    if la:
        lines.append("Launch to exit, --standalone, no-op workers (--no-python /bin/true), median:")
        by = {(r["launcher"], r["nproc"]): r for r in la}
        for r in la:
            lines.append(f"{r['launcher']:14s} nproc={r['nproc']}: {r['wall_ms']:8.1f} ms  launcher peak RSS {r['peak_rss_mib']:7.1f} MiB")
        for other in ("torchrun-1.13", "torchrun-2.6"):
            for n in (2, 8):
                t, o = by.get(("trun", n)), by.get((other, n))
                if t and o:
                    lines.append(f"ratio {other}/trun nproc={n}: time x{ratio(o['wall_ms'], t['wall_ms'])}, "
                                 f"memory x{ratio(o['peak_rss_mib'], t['peak_rss_mib'])}")
    rs = res.get("restart", [])
    if rs:
        by = {r["launcher"]: r for r in rs}
        for r in rs:
            lines.append(f"restart {r['launcher']}: worker crash to replacement {r['crash_to_restart_ms']:.1f} ms")
        for other in ("torchrun-1.13", "torchrun-2.6"):
            if "trun" in by and other in by:
                lines.append(f"ratio {other}/trun restart: "
                             f"x{ratio(by[other]['crash_to_restart_ms'], by['trun']['crash_to_restart_ms'])}")
    wm = [r for r in res.get("warm", []) if "crash_to_ready_ms" in r]
    if wm:
        lines.append("Warm start: worker crash until both replacements imported torch, formed the group, all-reduced (median):")
        by = {r["launcher"]: r for r in wm}
        for r in wm:
            lines.append(f"warm {r['launcher']:14s}: {r['crash_to_ready_ms']:8.1f} ms (script running after "
                         f"{r['crash_to_script_ms']:.1f} ms)")
        if "trun" in by and "trun-warm" in by:
            lines.append(f"ratio trun-warm/trun crash to ready: x{by['trun-warm']['crash_to_ready_ms'] / by['trun']['crash_to_ready_ms']:.2f}")
        if "torchrun-1.13" in by and "trun-warm" in by:
            lines.append(f"ratio torchrun-1.13/trun-warm crash to ready: "
                         f"x{ratio(by['torchrun-1.13']['crash_to_ready_ms'], by['trun-warm']['crash_to_ready_ms'])}")
    for r in res.get("warm", []):
        if "pool" in r:
            lines.append("warm start " + r["pool"])
    rc = res.get("recovery", [])
    if rc:
        lines.append("Recovery: node 2 of 3 lost, until both survivors all-reduce in a world of 2 (median):")
        by = {(r["launcher"], r["kind"]): r for r in rc}
        for r in rc:
            got = (f"{r['seconds']:.2f} s" if r["seconds"] is not None else
                   f"no recovery in {r['cap_seconds']:.0f} s in {r['reps'] - r['recovered']} of {r['reps']} runs")
            lines.append(f"recovery {r['launcher']:14s} {r['kind']:6s}: {got}")
        for kind in ("crash", "silent"):
            for mine in ("trun-c10d", "trun-trun", "trun-c10d-warm", "trun-trun-warm"):
                t, o = by.get((mine, kind)), by.get(("torchrun-1.13", kind))
                if t and o and t["seconds"]:
                    other = (f"x{ratio(o['seconds'], t['seconds'])}" if o["seconds"] is not None else
                             f"more than x{ratio(o['cap_seconds'], t['seconds'])} (torchrun: none in "
                             f"{o['cap_seconds']:.0f} s)")
                    lines.append(f"ratio torchrun-1.13/{mine} recovery {kind}: time {other}")
    sp = res.get("spare", [])
    if sp:
        lines.append("Spare: node 2 of 3 lost, a 4th waiting; until the survivors and the spare all-reduce in a "
                     "world of 3 (median):")
        for r in sp:
            got = (f"{r['seconds']:.2f} s" if r["seconds"] is not None else
                   f"no takeover in {r['cap_seconds']:.0f} s in {r['reps'] - r['recovered']} of {r['reps']} runs")
            lines.append(f"spare {r['launcher']:14s} {r['kind']:6s}: {got}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["store", "conns", "launch", "restart", "warm", "rdzv", "recovery", "spare"])
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--out-dir", default=os.path.join(REPO, "bench", "results"))
    args = ap.parse_args()
    quick = args.quick or os.environ.get("BENCH_QUICK") == "1"
    reps = 1 if quick else args.reps
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
           "command": "BENCH_QUICK=1 make bench" if quick else "make bench"}
    if args.only in (None, "store"):
        res["store"] = store_bench(reps, quick)
    if args.only in (None, "conns"):
        res["conns"] = conns_bench(100 if quick else args.conns)
    if args.only in (None, "launch"):
        res["launch"] = launch_bench(reps, (2,) if quick else (2, 8))
    if args.only in (None, "restart"):
        res["restart"] = restart_bench(reps)
    if args.only in (None, "warm"):
        res["warm"] = warm_bench(reps)
    if args.only in (None, "rdzv"):
        res["rdzv"] = rdzv_bench(reps, (8,) if quick else (8, 64, 256, 1000, 10000))
        res["rdzv_failed"] = RDZV_FAILED
    if args.only in (None, "recovery"):
        import recovery  # bench/recovery.py
        if os.geteuid() != 0:
            log("recovery: skipped (needs root for its network namespaces)")
        elif quick:
            res["recovery"] = recovery.recovery_bench(1, ("trun-c10d", "trun-trun", "trun-c10d-warm"), ("crash",))
        else:
            res["recovery"] = recovery.recovery_bench(reps)
    if args.only in (None, "spare"):
        import spare  # bench/spare.py
        if os.geteuid() != 0:
            log("spare: skipped (needs root for its network namespaces)")
        elif quick:
            res["spare"] = spare.spare_bench(1, ("trun-c10d", "trun-trun"), ("crash",))
        else:
            res["spare"] = spare.spare_bench(reps)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"{datetime.datetime.now(datetime.timezone.utc).date().isoformat()}-cpu.json")
    parts = ("store", "conns", "launch", "restart", "warm", "rdzv", "recovery", "spare")
    if args.only:
        # One part re-measured: keep the other parts of the day's file, or of the newest earlier one, each
        # with the date it was measured on (readme.py says which).
        older = sorted(f for f in os.listdir(args.out_dir) if f.endswith("-cpu.json"))
        base = path if os.path.exists(path) else (os.path.join(args.out_dir, older[-1]) if older else None)
        if base:
            old = json.load(open(base))
            measured = old.get("measured") or {p: old["date"] for p in parts if p in old}
            old.update({k: v for k, v in res.items() if k.startswith(args.only) or k in ("date", "machine")})
            measured[args.only] = res["date"]
            old["measured"] = measured
            res = old
    res["summary"] = summarize(res)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(res["summary"])
    print(f"results: {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
    main()

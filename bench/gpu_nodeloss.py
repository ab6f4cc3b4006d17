"""Issue 39 items 1 (node loss) and 3 (NCCL recovery) on one N-GPU box: K agents (GPU_NL_AGENTS, 2) of N/K GPUs
each (agent i on GPUs i*N/K..; --nnodes 1:K, agent 0 hosts the rendezvous store), NCCL, an all-reduce every
50 ms in every worker. Each trun job measures two things, in this order:
  crash  one of the last agent's workers is SIGKILLed: until all N workers of the next round have all-reduced;
  loss   then the last agent is lost, as one of:
           kill  the agent and all its processes SIGKILLed at once (a node crash: its connections reset),
           stop  the agent and all its processes SIGSTOPped (a silent node: nothing resets; NCCL and the store
                 wait), killed at the job's end;
         until every survivor's worker has all-reduced in the world of N - N/K.
The survivors are inside an NCCL all-reduce when the peer goes: the time includes their teardown. Configurations:
trun with --rdzv-backend c10d and trun, each cold / --warm-start / --warm-start --warm-start-cuda (/ and
--warm-start-nccl: "warm-nccl"); "hostid"
variants give the agents different NCCL_HOSTID (NCCL takes them for two hosts: NET/Socket between them, as
between real nodes); torchrun 2.11 (c10d) once per kind (kill, stop, crash alone), a recovery not seen within
TORCHRUN_CAP seconds counting as none.
Times run from the kill (the bench's clock just before the first signal) to the last of the new round's
first all-reduces (the workers' own clocks; one machine, one clock); each sample has its timeline: workers'
exits and starts (trun's events), and each new worker's script start, torch import, CUDA context, process
group and first all-reduce. A warm configuration kills only once every pool process is ready (as
gpu_recovery4.py does).

Run on the GPU box (build/portable carried):  python3 bench/gpu_nodeloss.py   (bench/gpu4.sh runs it)
Env: OUT (default build/gpu-results), TRUN_BIN (build/portable), GPU_NL_BUDGET (seconds, default 480; what
would not fit is skipped and listed), GPU_NL_CONFIGS (comma list of configuration names, default all),
GPU_NL_AGENTS (2; 4 on an 8-GPU box gives 4 x 2), GPU_NL_SHARE (1: every agent one worker on GPU 0, NCCL_HOSTID
apart: the 1-GPU proxy), GPU_NL_BACKEND (nccl; gloo tries it on a CPU box: one
worker per agent, e.g.
GPU_NL_BACKEND=gloo TRUN_BIN=build PYTHON=/usr/bin/python3 /usr/bin/python3 bench/gpu_nodeloss.py).
Writes $OUT/<date>-<gpu>-nodeloss/nodeloss.json after every measurement, run.log, and each job's launcher
logs and events (<config>-agent<i>.err/.events).
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
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

BACKEND = os.environ.get("GPU_NL_BACKEND", "nccl")
AGENTS = int(os.environ.get("GPU_NL_AGENTS", "2"))
# GPU_NL_SHARE=1: the 1-GPU proxy: every agent runs one worker on GPU 0, NCCL_HOSTID apart (NCCL then takes the
# agents for hosts and all-reduces over sockets), so that a 1-GPU box runs NCCL's side of a node loss.
SHARE = os.environ.get("GPU_NL_SHARE") == "1"
BUDGET = float(os.environ.get("GPU_NL_BUDGET", "480"))
SETUP_CAP = 90.0  # the first round of a job
TRUN_CAP = 40.0  # trun: a recovery not seen this long after the event counts as none
TORCHRUN_CAP = 30.0
gc.nvls_off()
gc.exit_on_term()

WORKER = gc.WORKER_READY + r'''
line = json.dumps({"pid": os.getpid(), "node": os.environ["GPU_NL_NODE"], "rank": rank, "local": lr,
                   "world": world, "preloaded": preloaded, "t0": t0, "import": t_import, "cuda": t_cuda,
                   "pg": t_pg, "ready": t_ready}) + "\n"
fd = os.open(os.path.join(d, "ready.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
while True:  # training: an all-reduce every 50 ms
    dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    time.sleep(0.05)
'''


def configs():
    """(name, launcher, rdzv backend, trun flags, loss kind, hostid apart, crash first), in priority order:
    the budget drops the tail."""
    wc, w = ["--warm-start", "--warm-start-cuda"], ["--warm-start"]
    out = []
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-cuda-kill", "trun", be, wc, "kill", False, True))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-nccl-kill", "trun", be, wc + ["--warm-start-nccl"], "kill", False, True))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-cuda-stop", "trun", be, wc, "stop", False, True))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-cold-kill", "trun", be, [], "kill", False, True))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-kill", "trun", be, w, "kill", False, True))
    out.append(("torchrun-kill", "torchrun", "c10d", [], "kill", False, False))
    out.append(("torchrun-crash", "torchrun", "c10d", [], None, False, True))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-cold-stop", "trun", be, [], "stop", False, True))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-cuda-kill-hostid", "trun", be, wc, "kill", True, False))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-cuda-stop-hostid", "trun", be, wc, "stop", True, False))
    out.append(("torchrun-stop", "torchrun", "c10d", [], "stop", False, False))
    for be in ("c10d", "trun"):
        out.append((f"trun-{be}-warm-stop", "trun", be, w, "stop", False, True))
    only = os.environ.get("GPU_NL_CONFIGS")
    if only:
        keep = only.split(",")
        out = [c for c in out if c[0] in keep]
    return out


def readies(d):
    out = []
    try:
        for ln in open(os.path.join(d, "ready.jsonl")):
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass
    except OSError:
        pass
    return out


def round_after(d, t, world):
    """The first round started after t with `world` ranks, once each rank has all-reduced: {rank: line}."""
    got = {}
    for x in readies(d):
        if x["t0"] > t and x["world"] == world and x["rank"] not in got:
            got[x["rank"]] = x
    return got if len(got) == world else None


def current(d, world):
    """The newest line of each rank of the newest round of `world` ranks."""
    got = {}
    for x in readies(d):
        if x["world"] == world:
            got[x["rank"]] = x
    return got


def timeline(got, evs, t):
    ms = lambda v: round((v - t) * 1000, 1)  # noqa: E731
    tl = {"started_warm": sum(1 for x in got.values() if x["preloaded"])}
    later = [e for e in evs if e["t"] > t - 0.5]
    exits = [e for e in later if e.get("event") == "worker_exit"]
    starts = [e for e in later if e.get("event") == "worker_start"]
    if exits:
        tl["worker_exits_ms"] = [ms(e["t"]) for e in exits][:8]
    if starts:
        tl["worker_starts_ms"] = [ms(e["t"]) for e in starts][:8]
    first = {}
    for e in later:
        first.setdefault(e.get("event"), ms(e["t"]))
    tl["events_first_ms"] = first
    for key in ("t0", "import", "cuda", "pg", "ready"):
        tl[f"workers_{key}_ms"] = [ms(x[key]) for _, x in sorted(got.items())]
    return tl


def wait_round(d, t, world, procs, cap):
    end = t + cap
    while time.time() < end:
        got = round_after(d, t, world)
        if got:
            return got
        if all(p.poll() is not None for p in procs):
            return None
        time.sleep(0.02)
    return None


def agent_cmd(launcher, be, flags, g, port, run_id, node, d, ev):
    common = ["--nnodes", f"1:{AGENTS}", "--nproc-per-node", str(g), "--rdzv-backend", be, "--rdzv-endpoint",
              f"127.0.0.1:{port}", "--rdzv-id", run_id, "--rdzv-conf", f"is_host={1 if node == 0 else 0}",
              "--max-restarts", "3", "--monitor-interval", "0.1"]
    script = [os.path.join(d, "w.py"), d, BACKEND]
    if launcher == "trun":
        # --local-addr apart: trun knows a node by it (else its host name), and a node cut off is excluded by
        # that name: two agents of one host named alike would exclude each other's host, the survivor's too
        return [gc.TRUN] + flags + ["--events", ev, "--restart-backoff", "0", "--crash-loop", "0", "--local-addr",
                                    f"127.0.0.{node + 1}"] + common + script
    return list(gc.torchrun_cmd()) + gc.torchrun_args(common) + script


def job(rs, cfg, n):
    name, launcher, be, flags, loss, hostid, crash_first = cfg
    k = AGENTS
    g = n // k
    last = f"node{k - 1}"
    warm = "--warm-start" in flags
    cap = TRUN_CAP if launcher == "trun" else TORCHRUN_CAP
    d = tempfile.mkdtemp(prefix=f"nl-{name}.")
    open(os.path.join(d, "w.py"), "w").write(WORKER)
    token = f"nl-{name}-{os.getpid()}-{time.time():.6f}"
    port = gc.free_port()
    procs, evs = [], [os.path.join(d, f"agent{i}.events") for i in range(k)]
    row = {"config": name, "launcher": launcher, "rdzv_backend": be, "flags": flags, "loss": loss,
           "hostid_apart": hostid, "crash": None, "loss_s": None, "notes": []}
    start = time.time()
    try:
        for i in range(k):
            env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR", NCCL_NVLS_ENABLE="0", PYTHON_EXEC=gc.PY,
                       TRUN_LOG_LEVEL="debug", GPU_NL_NODE=f"node{i}", **{gc.JOB_VAR: token})
            if BACKEND == "nccl" and SHARE:
                env["CUDA_VISIBLE_DEVICES"] = "0"  # every agent on GPU 0; NCCL_HOSTID apart (below)
            elif BACKEND == "nccl":
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i * g + k) for k in range(g))
            else:
                env.pop("CUDA_VISIBLE_DEVICES", None)
            if hostid or SHARE:
                env["NCCL_HOSTID"] = f"trun-nl-node{i}"
            cmd = agent_cmd(launcher, be, flags, g, port, f"nl{port}", i, d, evs[i])
            procs.append(subprocess.Popen(cmd, env=env, start_new_session=True,
                                          stdout=open(os.path.join(d, f"agent{i}.out"), "w"),
                                          stderr=open(os.path.join(d, f"agent{i}.err"), "w")))
            if i == 0:
                time.sleep(1.0)  # agent 0 hosts the rendezvous store
        if wait_round(d, start, n, procs, SETUP_CAP) is None:
            raise RuntimeError(f"no round of {n} workers within {SETUP_CAP:.0f} s")
        row["setup_s"] = round(time.time() - start, 1)

        def settle():
            cur = current(d, n)
            if warm:
                have = gc.wait_pool(token, n, exclude={x["pid"] for x in cur.values()})
                if have < n:
                    row["notes"].append(f"only {have} of {n} pool processes ready after 60 s")
            time.sleep(0.5)
            return cur

        if crash_first:
            cur = settle()
            victim = [x for x in cur.values() if x["node"] == last]
            if not victim:
                raise RuntimeError(f"no worker of agent {k - 1} in the round")
            t = time.time()
            os.kill(victim[0]["pid"], signal.SIGKILL)
            got = wait_round(d, t, n, procs, cap)
            if got is None:
                worlds = sorted({x["world"] for x in readies(d) if x["t0"] > t})
                row["crash"] = {"seconds": None}
                row["notes"].append(f"crash: no round of {n} within {cap:.0f} s (worlds seen after: {worlds})")
                rs.log(f"{name:34s} crash: none in {cap:.0f} s (worlds after: {worlds})")
            else:
                secs = max(x["ready"] for x in got.values()) - t
                row["crash"] = {"seconds": round(secs, 3), "timeline": timeline(got, sum((gc.events(e) for e in evs),
                                                                                        []), t)}
                rs.log(f"{name:34s} crash: {secs:6.3f} s")
            rs.save()
        if loss:
            if crash_first and row["crash"]["seconds"] is None:
                raise RuntimeError("the loss is not measured: the crash was not recovered")
            cur = settle()
            targets = set(gc.tree(procs[-1].pid))
            targets |= set(gc.job_pids(token, f"GPU_NL_NODE={last}"))
            sig = signal.SIGKILL if loss == "kill" else signal.SIGSTOP
            t = time.time()
            for p in sorted(targets):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            got = wait_round(d, t, n - g, procs[:-1], cap)
            if got is None:
                worlds = sorted({x["world"] for x in readies(d) if x["t0"] > t})
                row["notes"].append(f"{loss}: no round of {g} within {cap:.0f} s (worlds seen after: {worlds})")
                rs.log(f"{name:34s} {loss}: none in {cap:.0f} s")
            else:
                secs = max(x["ready"] for x in got.values()) - t
                row["loss_s"] = round(secs, 3)
                row["loss_timeline"] = timeline(got, sum((gc.events(e) for e in evs[:-1]), []), t)
                exits = row["loss_timeline"].get("worker_exits_ms")
                rs.log(f"{name:34s} {loss}: {secs:6.3f} s  survivors' exits {exits}"
                       f" ms, ready {row['loss_timeline']['workers_ready_ms']} ms")
    except Exception as e:  # noqa: BLE001
        row["notes"].append(str(e))
        rs.log(f"{name:34s} {e}")
    finally:
        gc.killtree(procs, token)
        row["wall_s"] = round(time.time() - start, 1)
        for i in range(k):
            for suffix in ("err", "events"):
                src = os.path.join(d, f"agent{i}.{suffix}")
                if os.path.exists(src):
                    with open(src, "rb") as f:
                        f.seek(0, 2)
                        f.seek(max(0, f.tell() - 400_000))
                        data = f.read()
                    open(os.path.join(rs.dir, f"{name}-agent{i}.{suffix}"), "wb").write(data)
        if os.path.exists(os.path.join(d, "ready.jsonl")):
            shutil.copy(os.path.join(d, "ready.jsonl"), os.path.join(rs.dir, f"{name}-ready.jsonl"))
        shutil.rmtree(d, ignore_errors=True)
    return row


def main():
    rs = gc.Results("nodeloss" if AGENTS == 2 else f"nodeloss-{AGENTS}agents", BUDGET)
    names = gc.box(rs, BACKEND)
    n = len(names) if BACKEND == "nccl" and not SHARE else AGENTS
    if n < AGENTS:
        rs.log(f"{n} GPU(s): {AGENTS} agents need {AGENTS} or more (GPU_NL_BACKEND=gloo tries the script on a CPU "
               "box)")
        rs.save()
        sys.exit(2)
    n -= n % AGENTS
    rs.res.update({"nproc_total": n, "layout": f"{AGENTS} agents x {n // AGENTS}", "trun_cap_s": TRUN_CAP,
                   "torchrun_cap_s": TORCHRUN_CAP})
    rs.log(f"node loss: {AGENTS} agents x {n // AGENTS} ({BACKEND}), torch {rs.res['torch']}, budget {BUDGET:.0f} s")
    rows = rs.res["steps"]["jobs"] = []
    for cfg in configs():
        name, launcher, loss = cfg[0], cfg[1], cfg[4]
        cap = TRUN_CAP if launcher == "trun" else TORCHRUN_CAP
        typical = (25 if launcher == "trun" else 15) + (6 if loss == "stop" else 0)
        need = typical if launcher == "trun" else typical + cap
        if rs.skip(name, need, console=False):
            continue
        try:
            rows.append(job(rs, cfg, n))
        except Exception:  # noqa: BLE001
            rs.error(f"{name}: " + traceback.format_exc())
        rs.save()
    summary = {}
    for r in rows:
        if r["crash"]:
            summary.setdefault("crash", {})[r["config"]] = r["crash"]["seconds"]
        if r["loss"]:
            summary.setdefault(r["loss"], {})[r["config"]] = r["loss_s"]
    rs.res["summary"] = summary
    crashes = [r["crash"]["seconds"] for r in rows if r["crash"] and r["crash"]["seconds"] is not None
               and "warm-cuda" in r["config"]]
    if crashes:
        summary["crash_warm_cuda_median"] = round(statistics.median(crashes), 3)
    if rs.res["skipped"]:
        names = [x.split(":")[0] for x in rs.res["skipped"]]
        for i in range(0, len(names), 5):
            rs.log(f"skipped (the budget): {', '.join(names[i:i + 5])}")
    rs.log(f"summary: {json.dumps(summary)}", console=False)
    for kind in ("crash", "kill", "stop"):
        items = [f"{c[5:] if c.startswith('trun-') else c} {'none' if v is None else v}"
                 for c, v in summary.get(kind, {}).items()]
        for i in range(0, len(items), 5):  # short lines: the device returns the console's end only
            rs.log(f"{kind:5s} (s): " + ", ".join(items[i:i + 5]))
    rs.log(f"results: {rs.save()}; {time.time() - rs.t0:.0f} s")


if __name__ == "__main__":
    main()

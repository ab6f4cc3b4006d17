"""--warm-start-nccl with real NCCL on the GPU box: does what it changes still work? One trun job on every GPU of
the box (`--warm-start --warm-start-cuda --warm-start-nccl`, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT, debug log
level), an all-reduce every 50 ms; in attempt 0 the last rank crashes after 4 s, attempt 1 runs 8 s and exits 0.
It records:
  - each pool process's "ready" line (its CUDA context, NCCL's set-up and how long it took);
  - the RAS address each worker of attempt 1 serves on (trun's debug line), and `trun-topo hang --once --json`
    asked there and at the job's NCCL_RAS_ADDR while attempt 1 trains (both should list the job's
    communicator with every rank: the job's address reaches a worker through the agent's relay);
  - whether the workers' own NCCL logs have their communicators' "Init COMPLETE" and "Init timings" lines in
    both attempts (NCCL re-read NCCL_DEBUG after the handover) and the "kernels" share of those timings;
  - any hang-detection warning trun printed (an unusable RAS answer);
  - the GPU memory (nvidia-smi) of attempt 1's workers and of the pool processes ready for the next restart;
  - the first start: from trun's launch to the last rank's first all-reduce (the pool's NCCL set-up is in it).
The same job then runs with --warm-start --warm-start-cuda only (the pool without NCCL's set-up), the pair
GPU_WN_REPS times (2). GPU_WN_FLAGS: more trun flags for both (--nccl-report: the report's own NCCL_DEBUG
then); GPU_WN_KINDS: which of the two (nccl,cuda).
Run on the GPU box (build/portable carried):  python3 bench/gpu_warm_nccl.py
Writes $OUT/<date>-<gpu>-warm-nccl/warm-nccl.json, trun's stderr and the workers' output.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_common as gc  # noqa: E402

gc.nvls_off()
gc.exit_on_term()

WORKER = gc.WORKER_READY + r'''
att = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
open(os.path.join(d, "ready.%d.%d" % (att, rank)), "w").write("%f\n" % t_ready)
end = time.time() + (4 if att == 0 else 8)
while time.time() < end:
    dist.all_reduce(x)
    torch.cuda.synchronize()
    time.sleep(0.05)
    if att == 0 and rank == world - 1 and time.time() > end - 0.1:
        os._exit(1)
dist.destroy_process_group()
'''


def topo_hang(addr):
    r = subprocess.run([os.path.join(gc.BIN, "trun-topo"), "hang", "--ras-addr", addr, "--once", "--json"],
                       capture_output=True, text=True, timeout=60)
    try:
        doc = json.loads(r.stdout) if r.stdout.strip() else None
    except ValueError:
        doc = None
    return {"addr": addr, "rc": r.returncode, "json": doc, "stdout": r.stdout[-3000:], "stderr": r.stderr[-1500:]}


def smi_memory():
    """{pid: MiB} of the processes on the GPUs (nvidia-smi --query-compute-apps)."""
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=60)
    mem = {}
    for ln in r.stdout.splitlines():
        f = [x.strip() for x in ln.split(",")]
        if len(f) == 2 and f[0].isdigit() and f[1].isdigit():
            mem[int(f[0])] = int(f[1])
    return mem


def job(d, n, tag, flags):
    """One job; what it showed (see the module's text). Pool memory: once attempt 1 trains and the pool for
    the next restart is ready, each pool process's and worker's GPU memory (nvidia-smi)."""
    res = {"flags": flags, "checks": {}}
    work = tempfile.mkdtemp(prefix="warm-nccl-")
    script = os.path.join(work, "w.py")
    with open(script, "w") as f:
        f.write(WORKER)
    env = dict(os.environ, TRUN_LOG_LEVEL="debug", PYTHON_EXEC=gc.PY, **{gc.JOB_VAR: "warm-nccl"})
    if "--nccl-report" not in flags:  # the report sets NCCL's debug variables itself, per round
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT")
    err_path, out_path = os.path.join(d, f"{tag}-trun.err"), os.path.join(d, f"{tag}-trun.out")
    cmd = [gc.TRUN, *flags, "--standalone", "--nproc-per-node", str(n), "--max-restarts", "1",
           "--restart-backoff", "0", "--crash-loop", "0", script, work, "nccl"]
    res["cmd"] = cmd
    t0 = time.time()
    with open(err_path, "w") as ef, open(out_path, "w") as of:
        p = subprocess.Popen(cmd, env=env, stdout=of, stderr=ef, start_new_session=True)
        asked = False
        try:
            while p.poll() is None and time.time() - t0 < 150:
                time.sleep(0.2)
                if asked or not all(os.path.exists(os.path.join(work, f"ready.1.{r}")) for r in range(n)):
                    continue
                time.sleep(1.0)  # a few all-reduces into attempt 1
                text = open(err_path).read()
                job_addr = re.findall(r"the workers' NCCL RAS listens on (\S+) ", text)
                own = re.findall(r"starts warm \(pool process \d+; its NCCL RAS serves on (\S+)\)", text)
                res["checks"]["job_ras"] = [topo_hang(a) for a in job_addr[:1]]
                res["checks"]["worker_ras"] = [topo_hang(a) for a in own[-n:]]
                time.sleep(5)  # the pool for the next restart, started with attempt 1, is ready by now (the
                # agent logs a pool process's "ready" only when it next looks, so its log cannot tell)
                text = open(err_path).read()
                workers = [int(x) for x in re.findall(r"starts warm \(pool process (\d+)", text)[-n:]]
                pool = [int(x) for x in re.findall(r"pool process (\d+) importing", text)[-n:]]
                mem = smi_memory()
                res["gpu_mib"] = {"workers": [mem.get(x) for x in workers], "pool": [mem.get(x) for x in pool],
                                  "all": mem}
                asked = True
            rc = p.wait(timeout=60)
        finally:
            if p.poll() is None:
                gc.kill_token("warm-nccl")
                p.kill()
                rc = None
    res["rc"], res["seconds"] = rc, round(time.time() - t0, 1)
    try:  # the first start: from trun's launch to the last rank's first all-reduce (one clock)
        res["first_ready_s"] = round(max(float(open(os.path.join(work, f"ready.0.{r}")).read())
                                         for r in range(n)) - t0, 3)
    except (OSError, ValueError):
        res["first_ready_s"] = None
    err, out = open(err_path).read(), open(out_path).read()
    res["ready_lines"] = [ln for ln in err.splitlines() if "pool process" in ln and " ready" in ln]
    res["warm_lines"] = [ln for ln in err.splitlines() if "starts warm" in ln or "starts cold" in ln]
    res["hang_warnings"] = [ln for ln in err.splitlines() if "hang detection" in ln and "warning" in ln]
    res["init_complete"] = len(re.findall(r"Init COMPLETE", out + err))
    res["init_timings"] = re.findall(r"Init timings[^\n]*", out + err)
    res["version_banner"] = len(re.findall(r"NCCL version \d", out + err))
    res["nccl_report"] = [ln for ln in err.splitlines() if "nccl-report" in ln or "communicator" in ln.lower()]
    return res


def main():
    n = len(gc.gpu_names())
    if n == 0:
        print("no GPU: nothing to run", flush=True)
        return 2
    d = gc.step_dir("warm-nccl")
    res = {"gpus": n, "torch": gc.torch_version(), "jobs": {}}
    extra = os.environ.get("GPU_WN_FLAGS", "").split()  # e.g. --nccl-report
    kinds = os.environ.get("GPU_WN_KINDS", "nccl,cuda").split(",")
    pair = [(k, f) for k, f in (("nccl", ["--warm-start", "--warm-start-cuda", "--warm-start-nccl"] + extra),
                                ("cuda", ["--warm-start", "--warm-start-cuda"] + extra)) if k in kinds]
    for i in range(int(os.environ.get("GPU_WN_REPS", "2"))):
        for kind, flags in pair:
            tag = f"{kind}-{i + 1}"
            r = res["jobs"][tag] = job(d, n, tag, flags)
            report(d, res, tag, r)
    return 0


def report(d, res, tag, r):
    """Rewrites the JSON (a killed run keeps what it measured) and prints the job's short lines."""
    with open(os.path.join(d, "warm-nccl.json"), "w") as f:
        json.dump(res, f, indent=1)
    keys = ("rc", "seconds", "first_ready_s", "gpu_mib", "ready_lines", "warm_lines", "hang_warnings",
            "init_complete", "version_banner", "nccl_report")
    print(tag, json.dumps({k: r.get(k) for k in keys}), flush=True)
    for t in r["init_timings"]:
        print(tag, t[:300], flush=True)
    for k in ("job_ras", "worker_ras"):
        for q in r["checks"].get(k, []):
            print(tag, k, q["addr"], "rc", q["rc"], (q["stdout"] or q["stderr"])[:300].replace("\n", " | "),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""--warm-start-nccl with real NCCL on the GPU box: does what it changes still work? One trun job on every GPU of
the box (`--warm-start --warm-start-cuda --warm-start-nccl`, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT, debug log
level), an all-reduce every 50 ms; in attempt 0 the last rank crashes after 4 s, attempt 1 runs 8 s and exits 0.
It records:
  - each pool process's "ready" line (its CUDA context, NCCL's set-up and how long it took);
  - the RAS address each worker of attempt 1 serves on (trun's debug line), and `trun-topo hang --once --json`
    asked there and at the job's NCCL_RAS_ADDR while attempt 1 trains (the first should list the job's
    communicator with every rank, the second should be refused: no worker serves there);
  - whether the workers' own NCCL logs have their communicators' "Init COMPLETE" and "Init timings" lines in
    both attempts (NCCL re-read NCCL_DEBUG after the handover) and the "kernels" share of those timings;
  - any hang-detection warning trun printed (an unusable RAS answer).
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


def main():
    n = len(gc.gpu_names())
    if n == 0:
        print("no GPU: nothing to run", flush=True)
        return 2
    d = gc.step_dir("warm-nccl")
    res = {"gpus": n, "torch": gc.torch_version(), "checks": {}}
    work = tempfile.mkdtemp(prefix="warm-nccl-")
    script = os.path.join(work, "w.py")
    with open(script, "w") as f:
        f.write(WORKER)
    env = dict(os.environ, TRUN_LOG_LEVEL="debug", NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT",
               PYTHON_EXEC=gc.PY, **{gc.JOB_VAR: "warm-nccl"})
    err_path, out_path = os.path.join(d, "trun.err"), os.path.join(d, "trun.out")
    cmd = [gc.TRUN, "--warm-start", "--warm-start-cuda", "--warm-start-nccl", "--standalone", "--nproc-per-node",
           str(n), "--max-restarts", "1", "--restart-backoff", "0", "--crash-loop", "0", script, work, "nccl"]
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
                job = re.findall(r"the workers' NCCL RAS listens on (\S+) ", text)
                own = re.findall(r"starts warm \(pool process \d+; its NCCL RAS serves on (\S+)\)", text)
                res["checks"]["job_ras"] = [topo_hang(a) for a in job[:1]]
                res["checks"]["worker_ras"] = [topo_hang(a) for a in own[-n:]]
                asked = True
            rc = p.wait(timeout=60)
        finally:
            if p.poll() is None:
                gc.kill_token("warm-nccl")
                p.kill()
                rc = None
    res["rc"], res["seconds"] = rc, round(time.time() - t0, 1)
    err, out = open(err_path).read(), open(out_path).read()
    res["ready_lines"] = [ln for ln in err.splitlines() if "pool process" in ln and " ready" in ln]
    res["warm_lines"] = [ln for ln in err.splitlines() if "starts warm" in ln or "starts cold" in ln]
    res["hang_warnings"] = [ln for ln in err.splitlines() if "hang detection" in ln and "warning" in ln]
    res["init_complete"] = len(re.findall(r"Init COMPLETE", out + err))
    res["init_timings"] = re.findall(r"Init timings[^\n]*", out + err)
    res["version_banner"] = len(re.findall(r"NCCL version \d", out + err))
    with open(os.path.join(d, "warm-nccl.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: res[k] for k in ("rc", "seconds", "ready_lines", "warm_lines", "hang_warnings",
                                          "init_complete", "version_banner")}, indent=1), flush=True)
    for t in res["init_timings"]:
        print(t[:300], flush=True)
    for k in ("job_ras", "worker_ras"):
        for q in res["checks"].get(k, []):
            print(k, q["addr"], "rc", q["rc"], (q["stdout"] or q["stderr"])[:600].replace("\n", " | "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

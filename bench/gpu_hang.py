"""Collective hangs on the GPU box (issue 37): how long until the culprit is named and until the job is training
again, trun (NCCL RAS, defaults but --hang-timeout) vs torchrun 2.11 (torch's NCCL watchdog), one call.

Each run starts bench/hang_worker.py on every GPU of the box (`--nproc-per-node gpu`): 50 healthy all-reduces,
then the last rank hangs in one of three ways (HANG_KIND): `sleep` (it never enters the 51st all-reduce),
`mismatch` (it broadcasts while the others all-reduce), `spin` (a GPU kernel that never ends, then the
all-reduce). Only the job's first attempt hangs: the restarted attempt trains and exits 0, so "training again" is
the moment a restarted rank finished its healthy phase. torch's process-group timeout is HANG_PG_TIMEOUT (60 s
here so that a run ends inside the call; torch's default is 10 min, and a launcher that waits for the watchdog
waits that long); trun runs with --hang-timeout HANG_TIMEOUT (10 s here; its default is 300 s).

Times are seconds from the moment the hang began (the last "healthy phase done" line + the worker's 3 s pause):
named = trun's `hang:` line naming the culprit (torchrun: the first watchdog timeout line, which names no
culprit); restarted = a rank of the next attempt done with its healthy phase. The culprit each launcher named
(trun: its `hang:` / root-cause lines; torchrun: its root-cause rank) is kept.

The flight recorder (trun's part, issue 37 item 2): trun runs with --log-dir so that every rank's dump stays in
<log dir>/<run>_*/flight_recorder/; each trun run records `fr_s` (when trun's "hang: flight recorder of this node's
ranks:" line came, same origin), that line (`fr_line`: `behind` / `mismatched` is what it concluded), the dump
files left and what `trun-topo hang --fr` reads in them (`fr_files`, `fr_topo`). One more run, `trun-name-only`
(--hang-timeout 0, kind sleep, HANG_NAME_ONLY=0 skips it), shows that asking for the dumps through torch's pipe
does not end the job: `first_exit_s` (the first worker exit or watchdog line) should be the watchdog's
(HANG_PG_TIMEOUT after the hang), well after `fr_s`. The spin kind is not named by RAS (equal counts), so it has
no flight-recorder line from RAS; it is named from two flight-recorder probes once the equal counts stood still
TRUN_HANG_SPIN_WINDOW seconds (20 here; trun's default 60): `spin_s` and `spin_line` ("culprit unknown" without
start times). HANG_TIMING=1 adds a `trun-timing` run of the spin kind with TORCH_NCCL_ENABLE_TIMING=1, where the
line should name the last rank (its all-reduce never started). What timing costs per collective is not measured
here (50 all-reduces are too few to see it).

Any GPU count of 2 or more: one rank per GPU, the last rank hangs. HANG_KINDS (default sleep,mismatch,spin) and
HANG_LAUNCHERS (trun, torchrun or both, the default) choose the runs; each run ends at HANG_RUN_LIMIT s (150).

Run on the GPU box: `GPU_STEPS=hang bash bench/gpu.sh` (a step of bench/gpu.py, in a call of its own: the runs
take up to 10 min, so HANG_LAUNCHERS=trun and HANG_LAUNCHERS=torchrun fit one device call each), or
python3 bench/gpu_hang.py alone (TRUN_BIN: the directory of trun, default build/portable), which writes
$OUT/<date>-gpu-hang.json and $OUT/<date>-gpu-hang-logs.txt after every run; copy both into bench/results/.
"""
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT", os.path.join(REPO, "build", "gpu-results"))
TRUN = os.path.join(os.environ.get("TRUN_BIN", os.path.join(REPO, "build", "portable")), "trun")
WORKER = os.path.join(REPO, "bench", "hang_worker.py")
PG_TIMEOUT = os.environ.get("HANG_PG_TIMEOUT", "60")
HANG_TIMEOUT = os.environ.get("HANG_TIMEOUT", "10")
LIMIT = float(os.environ.get("HANG_RUN_LIMIT", "150"))


def fr_files(logdir):
    """The dumps trun's workers left under --log-dir, and what trun-topo hang --fr reads in them."""
    files = []
    for root, _, names in os.walk(logdir):
        if os.path.basename(root) == "flight_recorder":
            files += sorted(os.path.join(root, n) for n in names if not n.endswith(".pipe"))
    topo = ""
    if files:
        q = subprocess.run([os.path.join(os.path.dirname(TRUN), "trun-topo"), "hang", "--fr"] + files,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        topo = q.stdout[-4000:]
    return [os.path.relpath(f, logdir) for f in files], topo


def run(name, cmd, kind):
    env = dict(os.environ, HANG_KIND=kind, PG_TIMEOUT=PG_TIMEOUT, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1",
               HANG_ONLY_ATTEMPT="0", TRUN_HANG_SPIN_WINDOW=os.environ.get("TRUN_HANG_SPIN_WINDOW", "20"))
    if name == "trun-timing":
        env["TORCH_NCCL_ENABLE_TIMING"] = "1"
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                         start_new_session=True)
    lines, healthy0, named, named_line, restarted, culprit = [], None, None, "", None, ""
    fr, fr_line, first_exit, spin, spin_line = None, "", None, None, ""
    try:
        for line in p.stdout:
            t = time.monotonic() - t0
            lines.append(f"{t:8.3f} {line.rstrip()}")
            if "healthy phase done (attempt 0)" in line:
                healthy0 = t
            elif "healthy phase done (attempt 1)" in line and restarted is None:
                restarted = t
            if named is None and (re.search(r"hang: rank .* is behind", line) or "Watchdog caught collective" in line):
                named, named_line = t, line.strip()
            if spin is None and "in a collective that does not complete" in line:
                spin, spin_line = t, line.strip()
            if fr is None and "flight recorder of this node's ranks:" in line:
                fr, fr_line = t, line.strip()
            if first_exit is None and re.search(r"exitcode|Watchdog caught|failed \(exitcode|SIGABRT", line):
                first_exit = t
            m = re.search(r"root cause: (rank \d+)", line) or re.search(r"rank\s*:\s*(\d+) \(local_rank", line)
            if m and not culprit:
                culprit = m.group(1)
            if t > LIMIT:
                os.killpg(p.pid, signal.SIGKILL)
                break
    finally:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        # A launcher killed at the limit leaves its workers (a sleeping rank keeps NCCL's RAS port and would answer
        # the next run's queries): nothing of this run may outlive it.
        subprocess.run(["pkill", "-9", "-f", WORKER], check=False)
        time.sleep(2)
    start = healthy0 + 3.0 if healthy0 is not None else None
    rel = lambda x: round(x - start, 2) if (x is not None and start is not None) else None
    m = re.search(r"hang: (rank \d+ \(local \d+, pid \d+\))", named_line)
    return {"launcher": name, "kind": kind, "exit": p.returncode, "named_s": rel(named), "restarted_s": rel(restarted),
            "named_line": named_line[:400], "trun_culprit": m.group(1) if m else None, "root_cause": culprit,
            "fr_s": rel(fr), "fr_line": fr_line[:1000], "first_exit_s": rel(first_exit),
            "spin_s": rel(spin), "spin_line": spin_line[:1000],
            "wall_s": round(time.monotonic() - t0, 2)}, lines


def measure(stem=None):
    """The runs HANG_KINDS x HANG_LAUNCHERS on every GPU: (result dict, log lines per run); with stem, the
    results and logs so far are written to stem.json / stem-logs.txt after every run."""
    import torch
    ngpu = torch.cuda.device_count()
    if ngpu < 2:
        raise SystemExit(f"gpu_hang: {ngpu} GPU(s): a collective hang needs 2 or more")
    common = ["--standalone", "--nproc-per-node", str(ngpu), "--max-restarts", "1", WORKER]
    launchers = {"trun": [TRUN, "--hang-timeout", HANG_TIMEOUT],
                 "torchrun-" + torch.__version__.split("+")[0]: [sys.executable, "-m", "torch.distributed.run"]}
    kinds = os.environ.get("HANG_KINDS", "sleep,mismatch,spin").split(",")
    only = os.environ.get("HANG_LAUNCHERS")
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "gpu_name": torch.cuda.get_device_name(0), "gpus": ngpu, "pg_timeout_s": int(PG_TIMEOUT),
           "hang_timeout_s": int(HANG_TIMEOUT), "runs": []}
    logs = []
    if os.environ.get("HANG_NAME_ONLY", "1") == "1":
        launchers["trun-name-only"] = [TRUN, "--hang-timeout", "0"]
    if os.environ.get("HANG_TIMING") == "1":
        launchers["trun-timing"] = [TRUN, "--hang-timeout", HANG_TIMEOUT]
    for kind in kinds:
        for name, base in launchers.items():
            if only and name.split("-")[0] not in only.split(","):
                continue
            if (name == "trun-name-only" and kind != "sleep") or (name == "trun-timing" and kind != "spin"):
                continue
            logdir = None
            if name.startswith("trun"):
                logdir = os.path.join(OUT, "%s-%s-logs" % (name, kind))
                subprocess.run(["rm", "-rf", logdir], check=False)
                base = base + ["--log-dir", logdir]
            r, lines = run(name, base + common, kind)
            if logdir:
                r["fr_files"], r["fr_topo"] = fr_files(logdir)
            print(json.dumps(r), flush=True)
            res["runs"].append(r)
            logs.append(f"==== {name} {kind}\n" + "\n".join(lines))
            if stem:  # after every run: a call cut at its limit still leaves what ran
                json.dump(res, open(stem + ".json", "w"), indent=1)
                open(stem + "-logs.txt", "w").write("\n".join(logs) + "\n")
    return res, logs


def main():
    os.makedirs(OUT, exist_ok=True)
    stem = os.path.join(OUT, datetime.date.today().isoformat() + "-gpu-hang")
    measure(stem)
    print(f"results: {stem}.json", flush=True)


if __name__ == "__main__":
    main()

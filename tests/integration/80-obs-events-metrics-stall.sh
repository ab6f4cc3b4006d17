#!/usr/bin/env bash
# Events, metrics and hang detection (trun --standalone --nproc-per-node 2, torch 1.13 gloo workers):
#  - tests/helpers/stall_worker.py: in attempt 0 rank 1 hangs silently and rank 0 waits for it in an
#    all-reduce; --stall-timeout 6 --stall-signal SIGUSR1 finds it, faulthandler dumps its stack, the
#    workers restart (one restart used) and attempt 1 all-reduces and exits 0;
#  - --events FILE: every line is JSON with ts/event/host; the stall, failure ("stalled for"), restart,
#    worker start/exit, rendezvous and job_end events are there with their fields;
#  - --metrics-port 0: the port is printed; curl GET /metrics during attempt 0 and attempt 1 gives the
#    Prometheus text (trun_up, trun_workers, restarts, stalls, store connections and ops, exit codes);
#    another path gives 404;
#  - --events fd:3 writes to an inherited descriptor; a bad --events path or a busy --metrics-port exit 2;
#  - GPU utilisation (fake NVML): a silent worker whose GPU is busy is alive; with TRUN_STALL_GPU_UTIL=0 it
#    is stalled.
# Exit: 0 pass, 77 skip, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
need_cmd curl curl

ev=$tmp/events.jsonl
mkdir -p "$tmp/out"
PYTHON_EXEC=$host_py setsid "$trun" --standalone --nproc-per-node 2 --max-restarts 1 --events "$ev" \
  --metrics-port 0 --stall-timeout 6 --stall-signal SIGUSR1 "$repo/tests/helpers/stall_worker.py" "$tmp/out" \
  >"$tmp/job.out" 2>"$tmp/job.err" &
job=$!
_bg_pgids+=("$job")

# wait_for WHAT CMD...: polls CMD until it succeeds while the job runs.
wait_for() {
  local what=$1
  shift
  until "$@"; do
    kill -0 "$job" 2>/dev/null || { cat "$tmp/job.err" >&2; fail "trun ended while waiting for $what"; }
    sleep 0.2
  done
}
wait_for "the metrics port" grep -q 'serving Prometheus metrics on port' "$tmp/job.err"
port=$(sed -n 's/.*serving Prometheus metrics on port \([0-9]*\).*/\1/p' "$tmp/job.err" | head -n1)
echo "metrics on port $port"

# Attempt 0 runs: both workers joined gloo (rank 0 is then stuck in its all-reduce, rank 1 asleep).
wait_for "attempt 0" bash -c "[ \$(grep -c 'attempt 0: joined' '$tmp/job.out') -eq 2 ]"
curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/m0.txt" || fail "GET /metrics failed"
cat "$tmp/m0.txt"
grep -qx 'trun_up 1' "$tmp/m0.txt" || fail "no trun_up 1"
grep -qx 'trun_workers{state="running"} 2' "$tmp/m0.txt" || fail "attempt 0: not 2 running workers"
grep -qx 'trun_restarts_total 0' "$tmp/m0.txt" || fail "attempt 0: restarts not 0"
grep -qx 'trun_rendezvous_round 0' "$tmp/m0.txt" || fail "attempt 0: rendezvous round not 0"
grep -q '^# TYPE trun_store_ops_total counter$' "$tmp/m0.txt" || fail "no TYPE line for trun_store_ops_total"
conns=$(sed -n 's/^trun_store_connections \([0-9]*\)$/\1/p' "$tmp/m0.txt")
[ "${conns:-0}" -ge 2 ] || fail "the agent's store should hold the agent's and the workers' connections, got '$conns'"
ops=$(sed -n 's/^trun_store_ops_total \([0-9]*\)$/\1/p' "$tmp/m0.txt")
[ "${ops:-0}" -gt 0 ] || fail "no store ops counted"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/other")
[ "$code" = 404 ] || fail "GET /other gave $code, want 404"

# The stall is found, the workers restart; attempt 1's all-reduce passes; scrape, then let them finish.
wait_for "attempt 1" bash -c "[ -f '$tmp/out/ok.1.0' ] && [ -f '$tmp/out/ok.1.1' ]"
curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/m1.txt" || fail "GET /metrics (attempt 1) failed"
cat "$tmp/m1.txt"
grep -qx 'trun_restarts_total 1' "$tmp/m1.txt" || fail "attempt 1: restarts not 1"
grep -qx 'trun_stalls_total 1' "$tmp/m1.txt" || fail "attempt 1: stalls not 1"
grep -qx 'trun_rendezvous_round 1' "$tmp/m1.txt" || fail "attempt 1: rendezvous round not 1"
grep -qx 'trun_workers{state="running"} 2' "$tmp/m1.txt" || fail "attempt 1: not 2 running workers"
grep -q '^trun_worker_exit_total{code="SIGTERM"} [12]$' "$tmp/m1.txt" || fail "attempt 0's workers' SIGTERM exits not counted"
touch "$tmp/out/go"
rc=0
wait "$job" || rc=$?
sed 's/^/    out| /' "$tmp/job.out" | tail -n 5
sed 's/^/    err| /' "$tmp/job.err"
[ $rc -eq 0 ] || fail "trun exited $rc, want 0 (attempt 1 succeeds)"

# faulthandler's dump of the hung rank (SIGUSR1), with the function it hangs in.
grep -q 'hang_here_forever' "$tmp/job.err" || fail "no faulthandler stack dump of rank 1 on stderr"
grep -q 'stalled for' "$tmp/job.err" || fail "the agent did not say the worker stalled"

# The event stream.
echo "== events"
cat "$ev"
"$host_py" - "$ev" <<'PY' || fail "event stream check failed"
import json, re, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
ts = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
for e in evs:
    assert ts.match(e["ts"]), e
    assert e["host"] and e["event"], e
names = [e["event"] for e in evs]
def one(name, **kw):
    got = [e for e in evs if e["event"] == name and all(e.get(k) == v for k, v in kw.items())]
    assert got, "no %s event with %r in %r" % (name, kw, names)
    return got[0]
d = one("discovery", nproc=2)
assert "gpus" in d, d
assert names.count("rendezvous_start") == 2 and names.count("rendezvous_end") == 2, names
r = one("rendezvous_end", round=1, ok=True, world_size=2)
assert r["duration_s"] >= 0 and r["group_rank"] == 0, r
assert len([e for e in evs if e["event"] == "worker_start"]) == 4, names
w = one("worker_start", rank=1, local_rank=1, attempt=0)
assert w["pid"] > 0
s = one("stall", rank=1, local_rank=1, signal="SIGUSR1", pid=w["pid"])
assert s["idle_s"] >= 6, s
f = one("failure", rank=1, final=False)
assert f["message"].startswith("stalled for"), f
one("restart", attempt=1, remaining=0)
x = one("worker_exit", pid=w["pid"])
assert x.get("signal") in ("SIGTERM", "SIGKILL", "SIGUSR1"), x
assert [e for e in evs if e["event"] == "worker_exit" and e.get("exit_code") == 0 and not e["stopped_by_agent"]]
assert names[-1] == "job_end" and evs[-1]["code"] == 0 and evs[-1]["restarts"] == 1, evs[-1]
assert names.index("stall") < names.index("failure") < names.index("restart"), names
print("events ok: %d lines" % len(evs))
PY

# --events fd:3 (the shell's descriptor), a successful job.
echo 'print("hi")' >"$tmp/hi.py"
trun_run --standalone --nproc-per-node 1 --events fd:3 "$tmp/hi.py" 3>"$tmp/fd.jsonl" >/dev/null 2>&1 ||
  fail "--events fd:3 job failed"
tail -n1 "$tmp/fd.jsonl" | grep -q '"event":"job_end".*"code":0' || fail "--events fd:3: no job_end: $(cat "$tmp/fd.jsonl")"

# Bad input: exit 2 with a message naming the problem.
rc=0
trun_run --standalone --events /nonexistent-dir/e.jsonl "$tmp/hi.py" 2>"$tmp/bad.err" || rc=$?
[ $rc -eq 2 ] || fail "unwritable --events: exit $rc, want 2"
grep -q '/nonexistent-dir/e.jsonl' "$tmp/bad.err" || fail "unwritable --events: message does not name the path"
"$host_py" -c 'import socket,sys,time; s=socket.socket(); s.bind(("0.0.0.0",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' >"$tmp/busy.port" &
busy=$!
until [ -s "$tmp/busy.port" ]; do sleep 0.1; done
rc=0
trun_run --standalone --metrics-port "$(cat "$tmp/busy.port")" "$tmp/hi.py" 2>"$tmp/busy.err" || rc=$?
kill $busy 2>/dev/null || true
[ $rc -eq 2 ] || fail "busy --metrics-port: exit $rc, want 2"
grep -q 'metrics-port' "$tmp/busy.err" || fail "busy --metrics-port: message does not name the option"

# GPU utilisation as a sign of life (the fake NVML, h200x2 fixture, utilisation from a file): a worker that
# sleeps silently for 4 stall timeouts while its GPU is 90% busy is alive (exit 0, no stall); with
# TRUN_STALL_GPU_UTIL=0 (GPU not counted) the same worker is stalled (exit 1, the stall event).
fx=$repo/tests/fixtures/nodes/h200x2
echo "90 90" >"$tmp/util"
gpu_env=(TRUN_SYSFS_ROOT="$fx/sys" TRUN_DEV_ROOT="$fx/dev" TRUN_DMI_ROOT="$fx/dmi" AWS_EC2_METADATA_DISABLED=true
  TRUN_NVML_LIBRARY="$build/libnvidia-ml-fake.so" TRUN_FAKE_NVML_TOPO="$fx/nvml.json" TRUN_FAKE_NVML_UTIL="$tmp/util")
rc=0
env "${gpu_env[@]}" "$trun" --standalone --nproc-per-node 2 --max-restarts 0 --stall-timeout 1 \
  --events "$tmp/gpu.jsonl" --no-python /bin/sleep 4 >/dev/null 2>"$tmp/gpu.err" || rc=$?
[ $rc -eq 0 ] || fail "busy GPUs: a sleeping worker was not alive (exit $rc): $(cat "$tmp/gpu.err")"
! grep -q '"event":"stall"' "$tmp/gpu.jsonl" || fail "busy GPUs: a stall event: $(cat "$tmp/gpu.jsonl")"
rc=0
env "${gpu_env[@]}" TRUN_STALL_GPU_UTIL=0 "$trun" --standalone --nproc-per-node 2 --max-restarts 0 \
  --stall-timeout 1 --events "$tmp/nogpu.jsonl" --no-python /bin/sleep 4 >/dev/null 2>"$tmp/nogpu.err" || rc=$?
[ $rc -eq 1 ] && grep -q '"event":"stall"' "$tmp/nogpu.jsonl" ||
  fail "GPU not counted: want a stall and exit 1, got exit $rc: $(cat "$tmp/nogpu.err")"
echo PASS

#!/usr/bin/env bash
# trun --preflight / trun-preflight / trun-topo preflight and trun --nccl-report on a CPU-only host.
#  1. No GPU (no NVML): trun-preflight prints one "skipped" line, exit 4; trun-topo preflight one line, exit 0;
#     trun --preflight one skip line and the workers run. Bad options: exit 2.
#  2. The fake NVML (h200x2 fixture: 2 NVLink GPUs) with the fake CUDA runtime + NCCL
#     (build/libcuda-nccl-fake.so: virtual time, all-reduce at TRUN_FAKE_BUSBW GB/s; ncclCommInitRank
#     refuses an id that is not rank 0's): trun --preflight, 2 local ranks: the table from 8 B to 1 MiB
#     (--max-bytes through TRUN_PREFLIGHT_ARGS), both ranks joined with rank 0's id, PASS at 327.5 GB/s and
#     the workers start; FAIL at 2.9 GB/s (named cause "P2P off"), exit 1 and no worker; --pass / --warn
#     thresholds from the options.
#  3. Two agents (static, loopback), one GPU each, --preflight: one communicator over both agents (the id
#     through the store), fabric "socket" (2 nodes, no EFA), PASS at 2.9 GB/s; both workers run.
#  6. A trun-preflight that never ends is killed after TRUN_PREFLIGHT_TIMEOUT (the time-out said), one whose
#     ranks exit 3 has both named as FAIL: exit 1 each time, no worker runs, no result file is left.
#  4. --nccl-report, one agent, 2 workers that write the one-pod H200 capture's lines as their NCCL log:
#     the workers get NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,P2P,NET and a per-rank NCCL_DEBUG_FILE under
#     attempt_0/<local rank>/; the report shows P2P/CUMEM 48 connections, verdict healthy. A user's
#     NCCL_DEBUG=WARN is kept (and warned about).
#     With TRUN_NCCL_REPORT_AFTER=1 and workers that live until it is printed: the report comes while the
#     workers run, and not again at the end (nothing changed).
#  5. --nccl-report with two agents (the two-pods capture): each reports NET/Socket; trun-topo --nccl-log
#     over both agents' files gives the split verdict.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
fx=$TRUN_REPO/tests/fixtures/nodes/h200x2
nvml=$TRUN_BUILD/libnvidia-ml-fake.so
fake=$TRUN_BUILD/libcuda-nccl-fake.so
pf=$TRUN_BUILD/trun-preflight
topo=$TRUN_BUILD/trun-topo
for f in "$nvml" "$fake" "$pf" "$topo"; do [ -e "$f" ] || fail "$f is missing; run make"; done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-65.XXXXXX")
pids=()
trap 'kill_marked; rm -rf "$tmp"' EXIT
no_gpu=(TRUN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 TRUN_SYSFS_ROOT=/nonexistent TRUN_DEV_ROOT=/nonexistent
  AWS_EC2_METADATA_DISABLED=true)
gpu=(TRUN_SYSFS_ROOT="$fx/sys" TRUN_DEV_ROOT="$fx/dev" TRUN_DMI_ROOT="$fx/dmi" TRUN_NVML_LIBRARY="$nvml"
  TRUN_FAKE_NVML_TOPO="$fx/nvml.json" AWS_EC2_METADATA_DISABLED=true TRUN_CUDART_LIBRARY="$fake"
  TRUN_NCCL_LIBRARY="$fake" TRUN_FAKE_NCCL_DIR="$tmp")

echo "== 1. no GPU: one-line skips; bad options"
rc=0
env "${no_gpu[@]}" "$pf" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 4 ] || fail "1: trun-preflight without GPU: exit $rc, want 4: $(cat "$tmp/o" "$tmp/e")"
[ "$(cat "$tmp/o" "$tmp/e" | wc -l)" = 1 ] && grep -q "^trun-preflight: skipped: no GPU" "$tmp/o" ||
  fail "1: want one skip line, got: $(cat "$tmp/o" "$tmp/e")"
rc=0
env "${no_gpu[@]}" "$topo" preflight >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 0 ] && [ "$(cat "$tmp/o" "$tmp/e" | wc -l)" = 1 ] && grep -q "skipped: no GPU visible" "$tmp/o" ||
  fail "1: trun-topo preflight without GPU: exit $rc: $(cat "$tmp/o" "$tmp/e")"
rc=0
env "${no_gpu[@]}" "$TRUN" --preflight --nproc-per-node 1 --no-python /usr/bin/touch "$tmp/ran.nogpu" \
  >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 0 ] && [ -e "$tmp/ran.nogpu" ] || fail "1: trun --preflight without GPU: exit $rc: $(cat "$tmp/e")"
[ "$(grep -c "preflight" "$tmp/e")" = 1 ] && grep -q "^trun: --preflight: skipped on node rank 0: no GPU" "$tmp/e" ||
  fail "1: trun --preflight without GPU: want one skip line: $(cat "$tmp/e")"
for bad in "--iters x" "--bogus 1" "--step-factor 1" "--iters"; do
  rc=0
  # shellcheck disable=SC2086
  "$pf" $bad >"$tmp/o" 2>"$tmp/e" || rc=$?
  [ $rc = 2 ] && [ -s "$tmp/e" ] || fail "1: trun-preflight $bad: exit $rc, want 2 and a message"
done
grep -q "busbw = algbw \* 2(n-1)/n" <<<"$("$pf" --help)" || fail "1: trun-preflight --help"
echo "ok 1"

echo "== 2. fake CUDA/NCCL, 2 local ranks: table, PASS / FAIL, thresholds"
rc=0
env "${gpu[@]}" TRUN_FAKE_BUSBW=327.5 TRUN_PREFLIGHT_ARGS="--max-bytes 1048576" "$TRUN" --preflight \
  --events "$tmp/ev.pass" --nproc-per-node 2 --no-python /usr/bin/touch "$tmp/ran.pass" >"$tmp/o" 2>"$tmp/e" || rc=$?
cat "$tmp/o" "$tmp/e"
[ $rc = 0 ] && [ -e "$tmp/ran.pass" ] || fail "2: PASS run: exit $rc or the workers did not run"
[ "$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum ' "$tmp/o")" = 18 ] || fail "2: want 18 table rows (8 B..1 MiB)"
grep -qE '^ +8 +2 +float +sum ' "$tmp/o" && grep -qE '^ +1048576 +262144 +float +sum ' "$tmp/o" ||
  fail "2: the table does not run from 8 B to 1 MiB"
grep -q "fabric nvlink" "$tmp/o" || fail "2: the layout is not NVLink"
grep -q "^# verdict: PASS: peak busbw 127.8 GB/s at 1048576 B" "$tmp/o" || fail "2: no PASS verdict"
sort "$tmp/ranks" | tr '\n' ' ' | grep -q "^rank 0 of 2 rank 1 of 2 $" || fail "2: ranks joined: $(cat "$tmp/ranks")"
rm -f "$tmp/ranks"
rc=0
env "${gpu[@]}" TRUN_FAKE_BUSBW=2.9 TRUN_PREFLIGHT_ARGS="--max-bytes 1048576" "$TRUN" --preflight \
  --events "$tmp/ev.fail" --nproc-per-node 2 --no-python /usr/bin/touch "$tmp/ran.fail" >"$tmp/o" 2>"$tmp/e" || rc=$?
cat "$tmp/o" "$tmp/e"
[ $rc = 1 ] || fail "2: FAIL run: exit $rc, want 1"
[ ! -e "$tmp/ran.fail" ] || fail "2: the workers started after a FAIL verdict"
grep -q "^# verdict: FAIL: .*likely cause: P2P off" "$tmp/o" || fail "2: no FAIL verdict with its cause"
grep -q "trun: --preflight failed on node rank 0: not starting the workers" "$tmp/e" || fail "2: no stop line"
# The "preflight" events: exactly these fields (ts and host aside), the peak rounded as the verdict line has it
# (127.8 GB/s at 1 MiB in the PASS run: the fake's latency term caps what small sizes reach).
pf_event() { # FILE: the preflight event, its floats to 1 decimal, ts/host dropped
  python3 -c 'import json,sys
evs=[json.loads(l) for l in open(sys.argv[1])]
p=[e for e in evs if e["event"]=="preflight"]
assert len(p)==1, p
e=p[0]; del e["ts"], e["host"]
if "peak_busbw_gbps" in e: e["peak_busbw_gbps"]=round(e["peak_busbw_gbps"],1)
print(json.dumps(e, sort_keys=True))' "$1"
}
want='{"at_bytes": 1048576, "event": "preflight", "fabric": "nvlink", "group_rank": 0, "peak_busbw_gbps": 127.8, "round": 0, "verdict": "pass"}'
got=$(pf_event "$tmp/ev.pass") || fail "2: no single preflight event: $(cat "$tmp/ev.pass")"
[ "$got" = "$want" ] || fail "2: PASS preflight event: got $got, want $want"
peak=$(sed -n 's/^# verdict: FAIL: peak busbw \([0-9.]*\) GB\/s.*/\1/p' "$tmp/o")
cause="P2P off - busbw is at PCIe / host-memory level on NVLink GPUs (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, or GPUs split across pods)"
want='{"at_bytes": 1048576, "cause": "'"$cause"'", "event": "preflight", "fabric": "nvlink", "group_rank": 0, "peak_busbw_gbps": '"$peak"', "round": 0, "verdict": "fail"}'
got=$(pf_event "$tmp/ev.fail") || fail "2: no single preflight event: $(cat "$tmp/ev.fail")"
[ "$got" = "$want" ] || fail "2: FAIL preflight event: got $got, want $want"
rc=0
env "${gpu[@]}" TRUN_FAKE_BUSBW=2.9 TRUN_PREFLIGHT_ARGS="--max-bytes 1048576 --pass 2 --warn 1" "$TRUN" \
  --preflight --nproc-per-node 2 --no-python /usr/bin/touch "$tmp/ran.thr" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 0 ] && grep -q "^# verdict: PASS: .*pass >= 2, warn >= 1" "$tmp/o" || fail "2: --pass/--warn: exit $rc: $(cat "$tmp/o")"
# The same thresholds as trun's own options: the 2.9 GB/s that FAILs above now PASSes, and they beat
# TRUN_PREFLIGHT_ARGS (the environment).
rc=0
env "${gpu[@]}" TRUN_FAKE_BUSBW=2.9 TRUN_PREFLIGHT_ARGS="--max-bytes 1048576 --pass 100 --warn 40" "$TRUN" \
  --preflight --preflight-pass 2 --preflight-warn 1 --nproc-per-node 2 --no-python /usr/bin/touch \
  "$tmp/ran.opt" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 0 ] && [ -e "$tmp/ran.opt" ] && grep -q "^# verdict: PASS: .*pass >= 2, warn >= 1" "$tmp/o" ||
  fail "2: --preflight-pass/--preflight-warn: exit $rc: $(cat "$tmp/o" "$tmp/e")"
# And as YAML keys: WARN (2.9 is below 50, at least 2.5), the workers still start.
printf 'preflight: true\npreflight-pass: 50\npreflight_warn: 2.5\nnproc-per-node: 2\n' >"$tmp/pf.yaml"
rc=0
env "${gpu[@]}" TRUN_FAKE_BUSBW=2.9 TRUN_PREFLIGHT_ARGS="--max-bytes 1048576" "$TRUN" --config "$tmp/pf.yaml" \
  --no-python /usr/bin/touch "$tmp/ran.yaml" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 0 ] && [ -e "$tmp/ran.yaml" ] && grep -q "^# verdict: WARN: .*pass >= 50, warn >= 2.5" "$tmp/o" ||
  fail "2: preflight-pass/preflight_warn in a config file: exit $rc: $(cat "$tmp/o" "$tmp/e")"
rc=0
"$TRUN" --preflight --preflight-pass 2 --preflight-warn 5 --no-python /bin/true >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 2 ] && grep -q -- "--preflight-warn 5 must not be above --preflight-pass 2" "$tmp/e" ||
  fail "2: warn above pass: exit $rc, want 2: $(cat "$tmp/e")"
echo "ok 2"

echo "== 3. two agents, one GPU each, --preflight: one communicator across agents"
rm -f "$tmp/ranks"
port=$(free_port)
pids=()
for r in 1 0; do
  env "${gpu[@]}" CUDA_VISIBLE_DEVICES=$r TRUN_FAKE_BUSBW=2.9 TRUN_PREFLIGHT_ARGS="--max-bytes 1048576" \
    "$TRUN" --nnodes 2 --node-rank $r --master-addr 127.0.0.1 --master-port "$port" --nproc-per-node 1 \
    --preflight --no-python /usr/bin/touch "$tmp/ran.mn$r" >"$tmp/mn$r.out" 2>"$tmp/mn$r.err" &
  pids+=($!)
done
wait_agents 120 60 touch "${pids[@]}" || fail "3: the agents did not exit"
for r in 0 1; do dump_agent "agent $r" "$tmp/mn$r.out" "$tmp/mn$r.err"; done
for p in "${pids[@]}"; do [ "${AGENT_RC[$p]}" = 0 ] || fail "3: agent $p exited ${AGENT_RC[$p]}"; done
[ -e "$tmp/ran.mn0" ] && [ -e "$tmp/ran.mn1" ] || fail "3: the workers did not run"
sort "$tmp/ranks" | tr '\n' ' ' | grep -q "^rank 0 of 2 rank 1 of 2 $" || fail "3: ranks joined: $(cat "$tmp/ranks")"
grep -q "2 rank(s) on 2 node(s), 1 per node.*fabric socket" "$tmp/mn0.out" || fail "3: layout is not 2 nodes over sockets"
grep -q "^# verdict: PASS" "$tmp/mn0.out" || fail "3: no PASS verdict on node rank 0"
echo "ok 3"

echo "== 4. --nccl-report, one agent: env, files, report"
one=$TRUN_REPO/tests/fixtures/nccl/nccl-2.28-h200x2-one-pod.log
rc=0
env "${gpu[@]}" "$TRUN" --nccl-report --nproc-per-node 2 --log-dir "$tmp/logs4" "$TRUN_REPO/tests/helpers/fake_nccl_log.py" \
  "$one" 1089,1090 "$tmp" >"$tmp/o" 2>"$tmp/e" || rc=$?
cat "$tmp/e"
[ $rc = 0 ] || fail "4: exit $rc"
for r in 0 1; do
  grep -qx "NCCL_DEBUG=INFO" "$tmp/env.$r" && grep -qx "NCCL_DEBUG_SUBSYS=INIT,P2P,NET" "$tmp/env.$r" ||
    fail "4: rank $r's NCCL env: $(cat "$tmp/env.$r")"
  grep -qE "^NCCL_DEBUG_FILE=$tmp/logs4/.*_[A-Za-z0-9]+/attempt_0/$r/nccl\.%h\.%p\.log$" "$tmp/env.$r" ||
    fail "4: rank $r's NCCL_DEBUG_FILE: $(grep FILE "$tmp/env.$r")"
done
[ "$(ls "$tmp"/logs4/*/attempt_0/*/nccl.*.log | wc -l)" = 2 ] || fail "4: want 2 NCCL log files"
grep -q "P2P/CUMEM  *48 connection(s)" "$tmp/e" || fail "4: the report lacks P2P/CUMEM 48"
grep -q "verdict: healthy (P2P/CUMEM)" "$tmp/e" || fail "4: the report lacks the healthy verdict"
grep -q "communicator 1 (n2#0): 2 ranks, 1 node(s), 2 local rank(s)" "$tmp/e" || fail "4: communicator line"
rc=0
env "${gpu[@]}" NCCL_DEBUG=WARN "$TRUN" --nccl-report --nproc-per-node 1 --log-dir "$tmp/logs4b" \
  "$TRUN_REPO/tests/helpers/fake_nccl_log.py" "$one" 1089 "$tmp" >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 0 ] && grep -qx "NCCL_DEBUG=WARN" "$tmp/env.0" || fail "4: the user's NCCL_DEBUG=WARN was not kept"
grep -q "NCCL_DEBUG=WARN (yours) logs no transports" "$tmp/e" || fail "4: no warning about NCCL_DEBUG=WARN"
rc=0
env "${gpu[@]}" TRUN_NCCL_REPORT_AFTER=1 "$TRUN" --nccl-report --nproc-per-node 2 --log-dir "$tmp/logs4c" \
  "$TRUN_REPO/tests/helpers/fake_nccl_log.py" "$one" 1089,1090 "$tmp" "$tmp/e4c" "after the workers' start" \
  >"$tmp/o" 2>"$tmp/e4c" || rc=$?
cat "$tmp/e4c"
[ $rc = 0 ] || fail "4: early report: exit $rc (the workers wait for the report made while they run)"
[ "$(grep -c "^==== trun: NCCL transport report" "$tmp/e4c")" = 1 ] || fail "4: want exactly one report"
grep -q "^trun: --nccl-report after the workers' start" "$tmp/e4c" || fail "4: the report did not come early"
echo "ok 4"

echo "== 5. --nccl-report, two agents on one host (the two-pods capture)"
two=$TRUN_REPO/tests/fixtures/nccl/nccl-2.28-h200x2-two-pods.log
port=$(free_port)
pids=()
for r in 1 0; do
  env "${gpu[@]}" CUDA_VISIBLE_DEVICES=$r "$TRUN" --nnodes 2 --node-rank $r --master-addr 127.0.0.1 \
    --master-port "$port" --nproc-per-node 1 --nccl-report --log-dir "$tmp/logs5-$r" \
    "$TRUN_REPO/tests/helpers/fake_nccl_log.py" "$two" 1183,1184 "$tmp" >"$tmp/r$r.out" 2>"$tmp/r$r.err" &
  pids+=($!)
done
wait_agents 120 60 fake_nccl_log "${pids[@]}" || fail "5: the agents did not exit"
for r in 0 1; do dump_agent "agent $r" "$tmp/r$r.out" "$tmp/r$r.err"; done
for r in 0 1; do
  grep -q "NET/Socket  *4 connection(s)" "$tmp/r$r.err" || fail "5: agent $r's report lacks NET/Socket 4"
done
grep -q "WARNING \[split\]" "$tmp/r0.err" || fail "5: no doctor split warning on node rank 0"
"$topo" --nccl-log "$tmp"/logs5-*/*/attempt_0/0/nccl.*.log >"$tmp/o" || fail "5: trun-topo --nccl-log failed"
cat "$tmp/o"
grep -q "verdict: intra-host traffic over NET/Socket: GPUs split across pods" "$tmp/o" ||
  fail "5: both agents' logs together do not give the split verdict"
echo "ok 5"
echo "== 6. a trun-preflight that never ends (TRUN_PREFLIGHT_TIMEOUT=1) and one whose ranks exit 3 (FAIL)"
printf '#!/bin/sh\nexec sleep 60\n' >"$tmp/pf-hang" && printf '#!/bin/sh\nexit 3\n' >"$tmp/pf-fail" &&
  chmod +x "$tmp/pf-hang" "$tmp/pf-fail" || fail "6: cannot write the stand-in programs"
for b in hang fail; do
  rc=0
  env "${gpu[@]}" TRUN_PREFLIGHT_BIN="$tmp/pf-$b" TRUN_PREFLIGHT_TIMEOUT=1 TMPDIR="$tmp" "$TRUN" --standalone \
    --nproc-per-node 2 --preflight --no-python /bin/sh -c 'touch "$1/ran"' sh "$tmp" >"$tmp/o6$b" 2>"$tmp/e6$b" || rc=$?
  cat "$tmp/e6$b"
  [ $rc -eq 1 ] || fail "6 ($b): exit $rc, want 1"
  [ ! -e "$tmp/ran" ] || fail "6 ($b): a worker ran after the preflight failed"
  grep -q "trun: --preflight failed on node rank 0: not starting the workers" "$tmp/e6$b" || fail "6 ($b): no stop line"
  ! ls "$tmp"/trun-preflight-* >/dev/null 2>&1 || fail "6 ($b): the result file was left behind"
done
grep -q "still running after 1 s: init timeout" "$tmp/e6hang" || fail "6: the time-out is not said"
[ "$(grep -c "measured a FAIL verdict (exit 3)" "$tmp/e6fail")" = 2 ] || fail "6: both FAIL ranks are not named"
echo "ok 6"
echo "PASS: preflight and NCCL report"

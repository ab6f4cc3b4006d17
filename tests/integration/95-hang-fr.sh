#!/usr/bin/env bash
# torch's flight recorder at a collective hang (agent/agent_fr.c, agent/hang/fr_probe.c, fr_summary.c):
# trun --standalone --nproc-per-node 2 on a node with 2 GPUs (the fake NVML, tests/fixtures/nodes/h200x2) and
# tests/helpers/fr_worker.py, which plays torch's side of the dump pipe with real captured dumps (the pipe and
# the dump files of ProcessGroupNCCL run only with GPUs: what a real torch does with them is bench/gpu_hang.py's
# to show), with the NCCL RAS stand-in (tests/fakes/ras_server.py, job-behind: rank 1 behind):
#  (a) the workers get the flight-recorder variables, pointing into a fresh 0700 directory; at the hang every
#      local rank is asked through its pipe, once; one console line says what the dumps say together (rank 1
#      behind: its last all-reduce #50 completed, rank 0 waits in #51); the hang event has it in
#      "flight_recorder" and the root cause in the failure report too; the directory is gone after exit;
#  (b) --log-dir: the directory is <run dir>/flight_recorder, mode 0700, kept, with the dumps; a variable the
#      user set is theirs (TORCH_NCCL_TRACE_BUFFER_SIZE=100, TORCH_FR_DUMP_TEMP_FILE; TORCH_FR_BUFFER_SIZE=300 is copied into TORCH_NCCL_TRACE_BUFFER_SIZE, the name torch's dump pipe reads);
#      (b6-b8) the workers' torch 2.11, found by its files, gets TORCH_FR_BUFFER_SIZE and no
#      TORCH_NCCL_DEBUG_INFO_TEMP_FILE (2.11 warns about those old names on every rank), torch 2.10 the old
#      names, and a user's old name stays alone;
#  (c) a node without a GPU (a gloo job): none of the variables, no directory;
#  every rank in NCCL (RAS: job-idle, equal frozen counts; TRUN_HANG_SPIN_WINDOW=4, so probes 2 s apart):
#  (d) the spin capture (every rank's all-reduce #51 scheduled in both probes): named, culprit unknown, not
#      acted on with --hang-timeout 0; (d3) the same with --hang-timeout 1: the round is stopped all the same,
#      the root cause says the culprit is unknown; (d2) rank 0's #51 started (as with TORCH_NCCL_ENABLE_TIMING), rank 1's scheduled: rank 1 named,
#      --hang-timeout 1 stops the round, root cause rank 1 of kind hang; (e) an idle job (every newest entry
#      completed): never named, over three probes (counted by the worker's dumps, not timed).
# Only loopback traffic. Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
fake=$repo/tests/fakes/ras_server.py
worker=$repo/tests/helpers/fr_worker.py
shim=$repo/build/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run 'make' first"
gpus=(TRUN_NVML_LIBRARY="$shim" TRUN_FAKE_NVML_TOPO="$repo/tests/fixtures/nodes/h200x2/nvml.json"
  AWS_EC2_METADATA_DISABLED=true)
export FR_FIXTURES=sleep_rank_0,sleep_rank_3 # rank 0 waits in all-reduce #51, rank 1 (rank 3's dump) is behind
server=
# A 4 s detection window (TRUN_HANG_WINDOW, default 15 s; RAS asked every 0.53 s instead of 2 s): the same
# verdicts, sooner.
export TRUN_HANG_WINDOW=4

start_ras() { # start_ras NAME DIR [MODE]: the stand-in (job-behind, rank 1) for the workers writing DIR/pid.<rank>
  local pf=$tmp/$1.port
  setsid "$host_py" "$fake" --mode "${3:-job-behind}" --port-file "$pf" --pid-dir "$2" --ranks 2 --behind 1 \
    2>"$tmp/$1.ras.log" &
  server=$!
  _bg_pgids+=("$server")
  for _ in $(seq 400); do
    [ -s "$pf" ] && break
    kill -0 "$server" 2>/dev/null || fail "$1: the RAS stand-in exited: $(cat "$tmp/$1.ras.log")"
    sleep 0.05
  done
  [ -s "$pf" ] || fail "$1: the RAS stand-in wrote no port file"
  addr=127.0.0.1:$(cat "$pf")
}
var() { sed -n "s/^$1=//p" "$2"; } # var NAME ENVFILE

# (a) the hang, the dumps, the line, the event, the root cause; the temporary directory removed.
mkdir -p "$tmp/a"
start_ras a "$tmp/a"
rc=0
run_pg env "${gpus[@]}" NCCL_RAS_ADDR="$addr" PYTHON_EXEC="$host_py" "$trun" --standalone --nproc-per-node 2 \
  --max-restarts 0 --hang-timeout 1 --events "$tmp/a.events" "$worker" "$tmp/a" >"$tmp/a.out" 2>"$tmp/a.err" || rc=$?
stop_pid "$server"
show "$tmp/a.out" "$tmp/a.err"
[ $rc -eq 1 ] || fail "(a): trun exited $rc, want 1 (the round stopped by --hang-timeout)"
for r in 0 1; do
  e=$tmp/a/env.$r
  [ "$(var TORCH_NCCL_TRACE_BUFFER_SIZE "$e")" = 2000 ] || fail "(a): rank $r: TORCH_NCCL_TRACE_BUFFER_SIZE"
  [ "$(var TORCH_NCCL_DUMP_ON_TIMEOUT "$e")" = 1 ] || fail "(a): rank $r: TORCH_NCCL_DUMP_ON_TIMEOUT"
  d=$(var TORCH_FR_DUMP_TEMP_FILE "$e")
  [[ $d == "$TMPDIR"/trun_fr_*/rank_ ]] || fail "(a): rank $r: TORCH_FR_DUMP_TEMP_FILE=$d, want \$TMPDIR/trun_fr_*/rank_"
  [ "$(var TORCH_NCCL_DEBUG_INFO_TEMP_FILE "$e")" = "$d" ] && [ "$(var TORCH_NCCL_DEBUG_INFO_PIPE_FILE "$e")" = "$d" ] ||
    fail "(a): rank $r: the three prefixes differ"
  [ -f "$tmp/a/dumped.$r.1" ] || fail "(a): rank $r was not asked for a dump"
  [ ! -e "$tmp/a/dumped.$r.2" ] || fail "(a): rank $r was asked twice"
done
[ ! -e "$(dirname "$d")" ] || fail "(a): the temporary flight-recorder directory $(dirname "$d") is left after exit"
want='hang: flight recorder of this node'"'"'s ranks: rank 0: nccl:all_reduce #51 scheduled [[1048576]] (hang_worker.py:15); rank 1: nccl:all_reduce #50 completed [[1048576]] (hang_worker.py:8): behind'
grep -qF "$want" "$tmp/a.err" || fail "(a): no flight-recorder line: $want"
[ "$(grep -c 'flight recorder of this node' "$tmp/a.err")" -eq 1 ] || fail "(a): want the flight-recorder line once"
expect_root a 'rank *: 1 \(local_rank: 1\)' 'flight recorder: rank 0: nccl:all_reduce #51 scheduled.*rank 1: nccl:all_reduce #50 completed.*behind'
"$host_py" - "$tmp/a.events" <<'PY' || fail "(a): the hang event's flight_recorder field"
import json, sys
h = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "hang"]
assert len(h) == 1 and h[0]["rank"] == 1, h
assert h[0]["flight_recorder"].startswith("rank 0: nccl:all_reduce #51 scheduled"), h[0]
assert h[0]["flight_recorder"].endswith("(hang_worker.py:8): behind"), h[0]
PY

# (b) --log-dir keeps the directory (0700) and the user's own values win.
mkdir -p "$tmp/b"
start_ras b "$tmp/b"
rc=0
run_pg env "${gpus[@]}" NCCL_RAS_ADDR="$addr" PYTHON_EXEC="$host_py" FR_EXIT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=100 \
  "$trun" --standalone --nproc-per-node 2 --log-dir "$tmp/b/logs" "$worker" "$tmp/b" >"$tmp/b.out" 2>"$tmp/b.err" || rc=$?
stop_pid "$server"
show "$tmp/b.err"
[ $rc -eq 0 ] || fail "(b): trun exited $rc, want 0"
frd=$(echo "$tmp"/b/logs/*/flight_recorder)
[ -d "$frd" ] || fail "(b): no <run dir>/flight_recorder under --log-dir"
[ "$(stat -c %a "$frd")" = 700 ] || fail "(b): $frd has mode $(stat -c %a "$frd"), want 700"
[ -p "$frd/rank_0.pipe" ] && [ -p "$frd/rank_1.pipe" ] || fail "(b): the workers' pipes are not kept in $frd"
[ "$(var TORCH_NCCL_TRACE_BUFFER_SIZE "$tmp/b/env.0")" = 100 ] || fail "(b): the user's TORCH_NCCL_TRACE_BUFFER_SIZE was changed"
[ "$(var TORCH_FR_DUMP_TEMP_FILE "$tmp/b/env.0")" = "$frd/rank_" ] || fail "(b): TORCH_FR_DUMP_TEMP_FILE"
mkdir -p "$tmp/b2"
run_pg env "${gpus[@]}" PYTHON_EXEC="$host_py" FR_EXIT=1 TORCH_FR_DUMP_TEMP_FILE=/mine/fr_ "$trun" --standalone \
  --nproc-per-node 1 "$worker" "$tmp/b2" >"$tmp/b2.out" 2>&1 || fail "(b2): trun failed: $(cat "$tmp/b2.out")"
[ "$(var TORCH_FR_DUMP_TEMP_FILE "$tmp/b2/env.0")" = /mine/fr_ ] && [ -z "$(var TORCH_NCCL_DEBUG_INFO_TEMP_FILE "$tmp/b2/env.0")" ] ||
  fail "(b2): the user's TORCH_FR_DUMP_TEMP_FILE was changed or paired"
env "${gpus[@]}" TORCH_NCCL_TRACE_BUFFER_SIZE=0 "$trun" --dry-run --standalone --nproc-per-node 1 "$worker" x >"$tmp/b3.out"
! grep -q 'TORCH_FR_DUMP_TEMP_FILE\|TORCH_NCCL_DEBUG_INFO_PIPE_FILE' "$tmp/b3.out" || fail "(b3): variables set with the flight recorder off"
env "${gpus[@]}" TORCH_FR_BUFFER_SIZE=300 "$trun" --dry-run --standalone --nproc-per-node 1 "$worker" x >"$tmp/b5.out"
grep -qx '  TORCH_NCCL_TRACE_BUFFER_SIZE=300' "$tmp/b5.out" || fail "(b5): TORCH_FR_BUFFER_SIZE=300 is not copied into TORCH_NCCL_TRACE_BUFFER_SIZE"
# (b6) the workers' torch 2.11 (found by its files in their virtual environment): the buffer size by its new
# name (torch 2.11 warns on every rank about the old one); torch 2.10: the old name; a user's old name stays.
for v in 2.11.0+cu130 2.10.0; do
  mkdir -p "$tmp/venv$v/bin" "$tmp/venv$v/lib/python3.12/site-packages/torch"
  printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n' >"$tmp/venv$v/pyvenv.cfg"
  printf '#!/bin/sh\n' >"$tmp/venv$v/bin/python3" && chmod +x "$tmp/venv$v/bin/python3"
  echo "__version__ = '$v'" >"$tmp/venv$v/lib/python3.12/site-packages/torch/version.py"
done
env "${gpus[@]}" PYTHON_EXEC="$tmp/venv2.11.0+cu130/bin/python3" "$trun" --dry-run --standalone --nproc-per-node 1 \
  "$worker" x >"$tmp/b6.out"
grep -qx '  TORCH_FR_BUFFER_SIZE=2000' "$tmp/b6.out" && grep -q '^  TORCH_FR_DUMP_TEMP_FILE=' "$tmp/b6.out" &&
  ! grep -q 'TORCH_NCCL_TRACE_BUFFER_SIZE\|TORCH_NCCL_DEBUG_INFO_TEMP_FILE' "$tmp/b6.out" ||
  { show "$tmp/b6.out"; fail "(b6): torch 2.11 did not get the new names alone"; }
env "${gpus[@]}" PYTHON_EXEC="$tmp/venv2.10.0/bin/python3" "$trun" --dry-run --standalone --nproc-per-node 1 \
  "$worker" x >"$tmp/b7.out"
grep -qx '  TORCH_NCCL_TRACE_BUFFER_SIZE=2000' "$tmp/b7.out" && grep -q '^  TORCH_NCCL_DEBUG_INFO_TEMP_FILE=' "$tmp/b7.out" &&
  ! grep -q 'TORCH_FR_BUFFER_SIZE' "$tmp/b7.out" ||
  { show "$tmp/b7.out"; fail "(b7): torch 2.10 did not get TORCH_NCCL_TRACE_BUFFER_SIZE alone"; }
env "${gpus[@]}" PYTHON_EXEC="$tmp/venv2.11.0+cu130/bin/python3" TORCH_NCCL_TRACE_BUFFER_SIZE=50 "$trun" --dry-run \
  --standalone --nproc-per-node 1 "$worker" x >"$tmp/b8.out"
grep -qx '  TORCH_NCCL_TRACE_BUFFER_SIZE=50' "$tmp/b8.out" && ! grep -q 'TORCH_FR_BUFFER_SIZE' "$tmp/b8.out" ||
  { show "$tmp/b8.out"; fail "(b8): the user's TORCH_NCCL_TRACE_BUFFER_SIZE was not kept alone"; }
env "${gpus[@]}" "$trun" --dry-run --standalone --nproc-per-node 1 "$worker" x >"$tmp/b4.out"
grep -q '^  TORCH_NCCL_DEBUG_INFO_PIPE_FILE=.*/trun_fr_.*/rank_$' "$tmp/b4.out" || fail "(b4): --dry-run does not show the pipe prefix"

# (c) no GPU: nothing set, no directory (the hang without a flight recorder is test 93's).
mkdir -p "$tmp/c"
run_pg env TRUN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 TRUN_CUDART_LIBRARY=/nonexistent/libcudart.so FR_EXIT=1 \
  PYTHON_EXEC="$host_py" "$trun" --standalone --nproc-per-node 2 "$worker" "$tmp/c" >"$tmp/c.out" 2>"$tmp/c.err" ||
  { show "$tmp/c.err"; fail "(c): trun failed"; }
! grep -q '^TORCH_NCCL_TRACE_BUFFER_SIZE=\|^TORCH_FR_DUMP_TEMP_FILE=\|^TORCH_NCCL_DEBUG_INFO\|^TORCH_NCCL_DUMP_ON_TIMEOUT=' "$tmp/c/env.0" ||
  fail "(c): flight-recorder variables on a node without a GPU"
! ls -d "$TMPDIR"/trun_fr_* 2>/dev/null || fail "(c): a flight-recorder directory without a GPU"

# (d) every rank waits, nothing tells which: named, culprit unknown, nothing stopped with --hang-timeout 0.
spin() { # spin NAME FIXTURES ARGS...: the job-idle stand-in, trun in the background; sets job
  local name=$1 fx=$2
  shift 2
  mkdir -p "$tmp/$name"
  start_ras "$name" "$tmp/$name" job-idle
  FR_FIXTURES=$fx TRUN_HANG_SPIN_WINDOW=4 NCCL_RAS_ADDR=$addr PYTHON_EXEC=$host_py setsid env "${gpus[@]}" "$trun" \
    --standalone --nproc-per-node 2 --max-restarts 0 --events "$tmp/$name.events" "$@" "$worker" "$tmp/$name" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  job=$!
  _bg_pgids+=("$job")
}
wait_for() { # wait_for NAME WHAT CMD...: polls CMD while the job runs (generous bound: 200 s)
  local name=$1 what=$2
  shift 2
  for _ in $(seq 1000); do
    "$@" && return 0
    kill -0 "$job" 2>/dev/null || { show "$tmp/$name.err"; fail "$name: trun ended while waiting for $what"; }
    sleep 0.2
  done
  show "$tmp/$name.err"
  fail "$name: no $what within 200 s"
}
spin d spin_rank_0,spin_rank_3 --hang-timeout 0
wait_for d "the hang named" grep -q 'every rank of this node is in a collective that does not complete' "$tmp/d.err"
wait_for d "a probe after it" test -e "$tmp/d/dumped.0.4"
kill -0 "$job" || fail "(d): trun ended"
stop_pid "$job"
stop_pid "$server"
show "$tmp/d.err"
grep -q 'hang: every rank of this node is in a collective that does not complete, counts frozen for [0-9]* s: every rank waits in nccl:all_reduce #51 (scheduled) in both flight-recorder probes: culprit unknown.*not acted on (--hang-timeout 0)' "$tmp/d.err" ||
  fail "(d): the line does not say every rank waits with the culprit unknown"
[ "$(grep -c 'in a collective that does not complete' "$tmp/d.err")" -eq 1 ] || fail "(d): want the line once"
[ ! -e "$tmp/d/attempt.1.0" ] || fail "(d): the workers restarted"
"$host_py" - "$tmp/d.events" <<'PY' || fail "(d): the hang event"
import json, sys
h = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "hang"]
assert len(h) == 1 and h[0]["rank"] == -1 and "culprit unknown" in h[0]["flight_recorder"], h
PY

# (d2) rank 0 started its all-reduce, rank 1 never did: rank 1 named and stopped.
spin d2 ../fr-spin-started.pickle,spin_rank_3 --hang-timeout 1
rc=0
wait "$job" || rc=$?
stop_pid "$server"
show "$tmp/d2.err"
[ $rc -eq 1 ] || fail "(d2): trun exited $rc, want 1 (the round stopped by --hang-timeout)"
grep -q 'hang: rank 1 (local 1, pid [0-9]*): every rank of this node is in a collective that does not complete.*rank 1 never started nccl:all_reduce #51 on the GPU while 1 rank(s) started it' "$tmp/d2.err" ||
  fail "(d2): rank 1 is not named as the rank whose collective never started"
expect_root d2 'rank *: 1 \(local_rank: 1\)' 'cause *: hang \(flight recorder\): every rank of its node in a collective that does not complete'

# (d3) the same with --hang-timeout 1: no rank to blame, the round is stopped all the same (not left to torch's
# watchdog) and the root cause says so.
spin d3 spin_rank_0,spin_rank_3 --hang-timeout 1
rc=0
wait "$job" || rc=$?
stop_pid "$server"
show "$tmp/d3.err"
[ $rc -eq 1 ] || fail "(d3): trun exited $rc, want 1 (the round stopped by --hang-timeout)"
grep -q 'hang: every rank of this node is in a collective that does not complete.*culprit unknown.*restarting the workers in 1 s unless it moves' "$tmp/d3.err" ||
  fail "(d3): the line does not say the round restarts with the culprit unknown"
grep -q 'hang: every rank of this node (culprit unknown) still in a collective that does not complete after 1 s' "$tmp/d3.err" ||
  fail "(d3): the stop is not said"
expect_root d3 'rank *: [01] \(local_rank: [01]\)' 'cause *: hang \(flight recorder\): every rank of its node in a collective that does not complete.*culprit unknown'

# (e) an idle job: every rank's newest collective completed; never named.
spin e sleep_rank_3,sleep_rank_3 --hang-timeout 1
wait_for e "three probes" test -e "$tmp/e/dumped.1.3"
stop_pid "$job"
stop_pid "$server"
show "$tmp/e.err"
! grep -q 'hang:' "$tmp/e.err" || fail "(e): an idle job was called hung"
[ ! -e "$tmp/e/attempt.1.0" ] || fail "(e): the workers restarted"
echo PASS

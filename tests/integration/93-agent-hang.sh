#!/usr/bin/env bash
# Hang detection wired into the agent (agent/agent_hang.c): trun --standalone --nproc-per-node 2 with real
# torch 1.13 gloo workers (tests/helpers/hang_worker.py: each writes its pid, then sleeps) and the NCCL RAS
# stand-in (tests/fakes/ras_server.py, job modes: one 2-rank communicator whose pids are the workers' own,
# read from the files they wrote), found through NCCL_RAS_ADDR in trun's environment:
#  (a) frozen counts with rank 1 behind: trun names rank 1 (one console line, the "hang" event with the
#      communicator, collective and count, trun_hangs_total), and with --hang-timeout 1 tears the round down
#      and restarts, after asking rank 1 alone for its Python stack (PYTHONFAULTHANDLER=1, SIGABRT: its
#      frames in the root cause); the restarted round hangs again, the restarts run out, exit 1 with rank 1 as
#      the root cause of kind hang in the failure report;
#  (b) advancing counts and (c) idle equal counts: never named, no restart, over more answers than the
#      detection window needs (counted by the stand-in, not timed);
#  (d) a lying answer (rank 1's pid is a process of this host that is no worker: a sleep the test owns):
#      a warning, no restart, the process is not killed;
#  (e) nothing listens at NCCL_RAS_ADDR: nothing said, the job runs;
#  (h) rank 1 exits 0 at once while RAS lists it as missing and rank 0 frozen in an all-reduce (what NCCL said
#      on 2 x H200 when a mismatched broadcast completed on rank 1's side): rank 1 is named ("already exited"),
#      --hang-timeout 1 stops the round, exit 1 with rank 1 as the root cause of kind hang;
#  (g) two agents on loopback (static rendezvous, rank 1 on node rank 1), --hang-timeout 0: only node rank
#      1's agent names rank 1, the other says nothing, nothing restarts;
#  (f) --hang-timeout bad values exit 2; --help lists it; TRUN_HANG_WINDOW=4 sets the window and the poll
#      interval (the debug line), 0.5 is refused with a warning (15 s used).
# The detection window is 4 s (TRUN_HANG_WINDOW; the agent then asks RAS every 0.53 s instead of 2 s, so every
# count of answers below spans as many windows as at the default 15 s).
# Only loopback traffic. Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
fake=$repo/tests/fakes/ras_server.py
worker=$repo/tests/helpers/hang_worker.py
server=
job=
export TRUN_HANG_WINDOW=4


# start_ras NAME MODE DIR: the stand-in for the job whose workers write DIR/pid.<rank>; sets addr.
start_ras() {
  local pf=$tmp/$1.port
  setsid "$host_py" "$fake" --mode "$2" --port-file "$pf" --pid-dir "$3" --ranks 2 --behind 1 \
    --served "$tmp/$1.served" 2>"$tmp/$1.ras.log" &
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

# start_job NAME ADDR ARGS...: trun in the background (its own process group), workers writing $tmp/NAME/.
start_job() {
  local name=$1 a=$2
  shift 2
  mkdir -p "$tmp/$name"
  NCCL_RAS_ADDR=$a PYTHON_EXEC=$host_py setsid "$trun" --standalone --nproc-per-node 2 \
    --events "$tmp/$name.events" "$@" "$worker" "$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  job=$!
  _bg_pgids+=("$job")
}

# wait_for NAME WHAT CMD...: polls CMD while the job runs (generous bound: 300 s).
wait_for() {
  local name=$1 what=$2
  shift 2
  for _ in $(seq 1500); do
    "$@" && return 0
    kill -0 "$job" 2>/dev/null || { show "$tmp/$name.out" "$tmp/$name.err"; fail "$name: trun ended while waiting for $what"; }
    sleep 0.2
  done
  show "$tmp/$name.err"
  fail "$name: no $what within 300 s"
}
served_at_least() { [ -s "$1" ] && [ "$(cat "$1")" -ge "$2" ]; }

# (a) rank 1 behind: named once, then the restart; the second round too; exit 1, root cause hang.
start_ras a job-behind "$tmp/a"
start_job a "$addr" --max-restarts 1 --hang-timeout 1 --metrics-port 0
wait_for a "the hang named" grep -q 'hang: rank 1 (local 1, pid [0-9]*) is behind in a hung collective' "$tmp/a.err"
port=$(sed -n 's/.*serving Prometheus metrics on port \([0-9]*\).*/\1/p' "$tmp/a.err" | head -n1)
metrics=$(curl -sf "http://127.0.0.1:$port/metrics" || true)
rc=0
wait "$job" || rc=$?
show "$tmp/a.err"
stop_pid "$server"
[ $rc -eq 1 ] || fail "(a): trun exited $rc, want 1 (the restart hangs again, restarts spent)"
[ -f "$tmp/a/attempt.1.0" ] && [ -f "$tmp/a/attempt.1.1" ] || fail "(a): the workers did not restart after the hang"
[ "$(grep -c 'is behind in a hung collective' "$tmp/a.err")" -eq 2 ] ||
  fail "(a): want one hang line per round (2), got $(grep -c 'is behind in a hung collective' "$tmp/a.err")"
grep -q 'hang: rank 1 .*communicator 0x5eed000000000001 (2 ranks).*rank 1 (pid [0-9]* on 127.0.0.1, GPU 1)' "$tmp/a.err" ||
  fail "(a): the hang line does not name the communicator and RAS's rank 1"
grep -q 'still behind after 1 s (--hang-timeout): restarting the workers' "$tmp/a.err" || fail "(a): no teardown line"
! grep -q 'hang: rank 0 ' "$tmp/a.err" || fail "(a): rank 0 (not behind) was named"
expect_root a 'rank *: 1 \(local_rank: 1\)' 'cause *: hang \(NCCL RAS\): behind in communicator 0x5eed000000000001.*launched AllReduce up to 50' \
  'cause *: .*; its Python stack \(innermost first\): hang_worker\.py:[0-9]+ in <module>'
# The culprit alone was asked for its stack (SIGABRT, PYTHONFAULTHANDLER): one dump per round, rank 1's.
[ "$(grep -c '^Fatal Python error: Aborted' "$tmp/a.err")" -eq 2 ] ||
  fail "(a): want one Python stack dump per round (2), got $(grep -c '^Fatal Python error: Aborted' "$tmp/a.err")"
grep -q 'hang: asked rank 1 (pid [0-9]*) for its Python stack' "$tmp/a.err" || fail "(a): no line asking rank 1 for its stack"
! grep -q 'hang: asked rank 0 ' "$tmp/a.err" || fail "(a): rank 0 (not behind) was asked for its stack"
grep -q '"event": *"hang"' "$tmp/a.events" || fail "(a): no hang event"
"$host_py" - "$tmp/a.events" <<'PY' || fail "(a): the hang event's fields"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
h = [e for e in evs if e["event"] == "hang"]
assert len(h) == 2, h
for e in h:
    assert e["rank"] == 1 and e["local_rank"] == 1 and e["communicator"] == "0x5eed000000000001", e
    assert e["collective"] == "AllReduce" and e["count"] == 51 and e["frozen_s"] >= 4, e
    assert "AllReduce up to 50" in e["why"], e
f = [e for e in evs if e["event"] == "failure" and e.get("cause_kind") == "hang"]
assert f, "no failure event of cause kind hang"
PY
grep -qx 'trun_hangs_total 1' <<<"$metrics" || fail "(a): trun_hangs_total not 1 during round 1: $metrics"

# (b) advancing and (c) idle equal counts: never named. --hang-timeout 1: a wrong verdict would restart.
for c in b:job-advancing c:job-idle; do
  name=${c%%:*}
  start_ras "$name" "${c#*:}" "$tmp/$name"
  start_job "$name" "$addr" --max-restarts 1 --hang-timeout 1
  wait_for "$name" "12 answers naming both workers" served_at_least "$tmp/$name.served" 12
  stop_pid "$job"
  stop_pid "$server"
  show "$tmp/$name.err"
  ! grep -Eq 'hang:|hang detection' "$tmp/$name.err" || fail "($name, ${c#*:}): trun spoke of a hang"
  ! grep -q '"event": *"hang"' "$tmp/$name.events" || fail "($name): a hang event"
  [ ! -e "$tmp/$name/attempt.1.0" ] || fail "($name): the workers restarted"
done

# (d) a lying answer: rank 1's pid is a process of this host that is no worker of the job.
mkdir -p "$tmp/d"
setsid sleep 600 &
victim=$!
_bg_pgids+=("$victim")
start_ras d job-behind "$tmp/d"
start_job d "$addr" --max-restarts 1 --hang-timeout 1
wait_for d "the workers' pids" test -s "$tmp/d/pid.1"
wait_for d "rank 0's pid" test -s "$tmp/d/pid.0"
echo "$victim" >"$tmp/d/pid.1.tmp" && mv "$tmp/d/pid.1.tmp" "$tmp/d/pid.1"
wait_for d "the warning" grep -q "hang: NCCL RAS at $addr shows communicator 0x5eed000000000001 hung with pid $victim of this host behind, but no such pid is a worker of this job" "$tmp/d.err"
served=$(cat "$tmp/d.served")
wait_for d "12 more answers" served_at_least "$tmp/d.served" $((served + 12))
kill -0 "$victim" || fail "(d): the process RAS named was killed"
stop_pid "$job"
stop_pid "$server"
show "$tmp/d.err"
[ "$(grep -c 'no such pid is a worker' "$tmp/d.err")" -eq 1 ] || fail "(d): want the warning once"
! grep -q 'is behind in a hung collective' "$tmp/d.err" || fail "(d): a foreign pid was named as ours"
[ ! -e "$tmp/d/attempt.1.0" ] || fail "(d): the workers restarted for a lying answer"
stop_pid "$victim"

# (e) nothing listens: a closed loopback port.
closed=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_job e "127.0.0.1:$closed" --max-restarts 0
wait_for e "both workers" test -e "$tmp/e/attempt.0.1" -a -e "$tmp/e/attempt.0.0"
sleep 2 # a few polls of the closed port (what must not happen has no event to wait for)
kill -0 "$job" || fail "(e): trun ended"
stop_pid "$job"
show "$tmp/e.err"
! grep -Eq 'hang:|hang detection|RAS' "$tmp/e.err" || fail "(e): trun spoke of RAS or a hang with nothing listening"

# (h) the culprit has exited: a worker of this round all the same.
mkdir -p "$tmp/h"
start_ras h job-gone "$tmp/h"
HANG_EXIT_RANK=1 start_job h "$addr" --max-restarts 0 --hang-timeout 1
rc=0
wait "$job" || rc=$?
stop_pid "$server"
show "$tmp/h.err"
[ $rc -eq 1 ] || fail "(h): trun exited $rc, want 1 (the round stopped by --hang-timeout)"
grep -q 'hang: rank 1 (local 1, pid [0-9]*, already exited) is behind in a hung collective' "$tmp/h.err" ||
  fail "(h): the exited rank 1 is not named"
! grep -q 'no such pid is a worker' "$tmp/h.err" || fail "(h): the exited worker was taken for a stranger"
expect_root h 'rank *: 1 \(local_rank: 1\)' 'cause *: hang \(NCCL RAS\)'

# (g) two agents (static rendezvous on loopback, one worker each; rank 1 on node rank 1), one RAS answer
# naming rank 1 behind: the agent whose worker it is names it (--hang-timeout 0: name only); the other agent
# says nothing (rank 1 is another agent's worker of this job, not a foreign pid).
mkdir -p "$tmp/g"
start_ras g job-behind "$tmp/g"
mport=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for nr in 1 0; do
  NCCL_RAS_ADDR=$addr PYTHON_EXEC=$host_py setsid "$trun" --nnodes 2 --node-rank $nr --master-addr 127.0.0.1 \
    --master-port "$mport" --nproc-per-node 1 --hang-timeout 0 --events "$tmp/g$nr.events" "$worker" "$tmp/g" \
    >"$tmp/g$nr.out" 2>"$tmp/g$nr.err" &
  eval "job$nr=\$!"
  _bg_pgids+=("$!")
done
job=$job1
wait_for g1 "node rank 1 names rank 1" grep -q 'hang: rank 1 (local 0, pid [0-9]*) is behind in a hung collective: .*not acted on (--hang-timeout 0)' "$tmp/g1.err"
served=$(cat "$tmp/g.served")
wait_for g1 "5 more answers" served_at_least "$tmp/g.served" $((served + 5))
stop_pid "$job1"
stop_pid "$job0"
stop_pid "$server"
show "$tmp/g0.err" "$tmp/g1.err"
! grep -Eq 'hang:|hang detection' "$tmp/g0.err" || fail "(g): node rank 0 spoke of the hang of node rank 1's worker"
[ "$(grep -c 'is behind in a hung collective' "$tmp/g1.err")" -eq 1 ] || fail "(g): node rank 1 named it not once"
grep -q '"event": *"hang"' "$tmp/g1.events" || fail "(g): no hang event on node rank 1"
[ ! -e "$tmp/g/attempt.1.0" ] || fail "(g): --hang-timeout 0 restarted the workers"

# (f) the option's values.
for bad in -1 abc nan 1e9 ''; do
  rc=0
  "$trun" --standalone --nproc-per-node 1 --hang-timeout "$bad" "$worker" x >"$tmp/f.out" 2>"$tmp/f.err" || rc=$?
  [ $rc -eq 2 ] || { show "$tmp/f.err"; fail "(f): --hang-timeout '$bad' exited $rc, want 2"; }
  grep -q -- '--hang-timeout' "$tmp/f.err" || fail "(f): the error for '$bad' does not name --hang-timeout"
done
grep -q -- '--hang-timeout' <<<"$("$trun" --help)" || fail "(f): --help does not list --hang-timeout"
# TRUN_HANG_WINDOW: the window and the poll interval scaled with it (said at debug level); a bad value is said
# and the default window used.
TRUN_LOG_LEVEL=debug "$trun" --standalone --nproc-per-node 1 --no-python true >"$tmp/f.out" 2>"$tmp/f.err" ||
  { show "$tmp/f.err"; fail "(f): trun with TRUN_HANG_WINDOW=4 failed"; }
grep -q 'hang detection: asking NCCL RAS at .* every 533 ms while the workers run (window 4 s)' "$tmp/f.err" ||
  { show "$tmp/f.err"; fail "(f): TRUN_HANG_WINDOW=4 did not set a 4 s window asked every 533 ms"; }
TRUN_HANG_WINDOW=0.5 "$trun" --standalone --nproc-per-node 1 --no-python true >"$tmp/f.out" 2>"$tmp/f.err" ||
  { show "$tmp/f.err"; fail "(f): trun with TRUN_HANG_WINDOW=0.5 failed"; }
grep -q 'TRUN_HANG_WINDOW=0.5 is not 1..3600 seconds: 15 s is used' "$tmp/f.err" ||
  { show "$tmp/f.err"; fail "(f): TRUN_HANG_WINDOW=0.5 was not refused with the default said"; }
echo "PASS"

#!/usr/bin/env bash
# The job's own NCCL RAS port and one node speaking for a hang (agent/agent_rasport.c, agent/agent_hang.c,
# agent/agent_failures.c), with real torch 1.13 gloo workers (tests/helpers/hang_worker.py: each writes the
# NCCL_RAS_ADDR it got and its pid, then sleeps) and the NCCL RAS stand-in (tests/fakes/ras_server.py) bound
# with --addr to the address the workers got (SO_REUSEPORT, as NCCL binds it). No NCCL_RAS_ADDR is set:
#  (a) two jobs at once on this host (--standalone, 2 workers each, --hang-timeout 0): each job's workers share
#      one NCCL_RAS_ADDR=127.0.0.1:<port>, the two jobs' ports differ, and while the jobs run nothing else can
#      bind the port (the agent holds it), nor can another user (nobody) listen there with any of
#      SO_REUSEADDR / SO_REUSEPORT; job A's RAS (its port) says rank 1 is behind, job B's says idle:
#      A names its rank 1, B says nothing (no hang, no warning about A's pids) over 12 answers;
#  (b) two agents (static rendezvous on loopback, one worker each; --hang-timeout 1 --max-restarts 0), each
#      node with its own port and a RAS stand-in on it answering job-wide; rank 1 (node rank 1) behind: only
#      node rank 1 prints the hang line, both exit 1, node rank 0's job report has rank 1 of kind hang as the
#      root cause;
#  (c) the same with rank 0 (node rank 0) behind: node rank 1's line names node rank 0's rank 0 and the
#      hang as why its workers stopped, and node rank 1 prints no hang line of its own;
#  (d) hardware evidence: as (b), each node with the fake NVML (one GPU of its own UUID) and --max-restarts 1,
#      node rank 1's GPU shows Xid 8 (a channel time-out: not a hardware Xid by itself, only warned about)
#      before rank 1 is found behind: at --hang-timeout node rank 1 names the Xid with the hang, puts itself on
#      the job's exclusion list (kind xid, its GPU), leaves the job and exits 3; node rank 0 (static: the job
#      ends with the node that left) names the Xid and exits 1;
#  (e) --rdzv-status, given only the store's address, shows the hang the agent named (a one-node static job).
# (b), (c) and (d) run at the same time. Only loopback traffic. Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
fake=$repo/tests/fakes/ras_server.py
worker=$repo/tests/helpers/hang_worker.py
unset NCCL_RAS_ADDR
# A 4 s detection window (TRUN_HANG_WINDOW, default 15 s; RAS asked every 0.53 s instead of 2 s): the same
# verdicts, sooner.
export TRUN_HANG_WINDOW=4

# wait_grep FILE REGEX WHAT PID
wait_grep() {
  for _ in $(seq 1500); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$4" 2>/dev/null || { show "$1"; fail "trun ended while waiting for $3"; }
    sleep 0.2
  done
  show "$1"
  fail "no $3 within 300 s"
}
served_at_least() { [ -s "$1" ] && [ "$(cat "$1")" -ge "$2" ]; }
# ras NAME MODE ADDR PIDDIR BEHIND: a stand-in on ADDR; its pid in ras_pid.
ras() {
  setsid "$host_py" "$fake" --mode "$2" --addr "$3" --port-file "$tmp/$1.port" --pid-dir "$4" --ranks 2 \
    --behind "$5" --served "$tmp/$1.served" 2>"$tmp/$1.ras.log" &
  ras_pid=$!
  _bg_pgids+=("$ras_pid")
  for _ in $(seq 400); do
    [ -s "$tmp/$1.port" ] && return 0
    kill -0 "$ras_pid" 2>/dev/null || fail "$1: the RAS stand-in exited: $(cat "$tmp/$1.ras.log")"
    sleep 0.05
  done
  fail "$1: the RAS stand-in did not listen on $3"
}
addr_re='^127\.0\.0\.1:[1-9][0-9]*$'

# (a) two jobs on one host.
for j in A B; do
  mkdir -p "$tmp/$j"
  PYTHON_EXEC=$host_py setsid "$trun" --standalone --nproc-per-node 2 --hang-timeout 0 --max-restarts 0 \
    --events "$tmp/$j.events" "$worker" "$tmp/$j" >"$tmp/$j.out" 2>"$tmp/$j.err" &
  eval "job$j=\$!"
  _bg_pgids+=("$!")
done
for j in A B; do
  eval "p=\$job$j"
  for r in 0 1; do wait_file "$tmp/$j/pid.$r" "job $j's rank $r" "$p"; done
done
addrA=$(cat "$tmp/A/ras_addr.0")
addrB=$(cat "$tmp/B/ras_addr.0")
echo "job A: NCCL_RAS_ADDR=$addrA, job B: NCCL_RAS_ADDR=$addrB"
[[ $addrA =~ $addr_re ]] || fail "(a): job A's workers got NCCL_RAS_ADDR='$addrA', want 127.0.0.1:<port>"
[[ $addrB =~ $addr_re ]] || fail "(a): job B's workers got NCCL_RAS_ADDR='$addrB', want 127.0.0.1:<port>"
[ "$(cat "$tmp/A/ras_addr.1")" = "$addrA" ] || fail "(a): job A's two workers got different RAS addresses"
[ "$(cat "$tmp/B/ras_addr.1")" = "$addrB" ] || fail "(a): job B's two workers got different RAS addresses"
[ "$addrA" != "$addrB" ] || fail "(a): two jobs on one host share the RAS port $addrA"
"$host_py" - "${addrA##*:}" <<'PY' || fail "(a): job A's RAS port is not held by its agent (a plain bind got it)"
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)
PY
# nor can another user take it to listen there, whatever the options (the held socket has no SO_REUSEADDR,
# with which any user's SO_REUSEADDR socket could bind and listen while nothing listens)
got=$("$host_py" - "${addrA##*:}" <<'PY'
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
for name, opts in (("none", ()), ("SO_REUSEADDR", (socket.SO_REUSEADDR,)), ("SO_REUSEPORT", (socket.SO_REUSEPORT,)),
                   ("both", (socket.SO_REUSEADDR, socket.SO_REUSEPORT))):
    s = socket.socket()
    for o in opts:
        s.setsockopt(socket.SOL_SOCKET, o, 1)
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
        s.listen(4)
        print("listened-with-" + name)
    except OSError:
        pass
    s.close()
print("done")
PY
) || fail "(a): could not run a bind as user nobody"
[ "$got" = done ] || fail "(a): another user (nobody) listened on job A's RAS port: $got"
ras A job-behind "$addrA" "$tmp/A" 1
rasA=$ras_pid
ras B job-idle "$addrB" "$tmp/B" 1
rasB=$ras_pid
wait_grep "$tmp/A.err" 'hang: rank 1 \(local 1, pid [0-9]*\) is behind in a hung collective: .*not acted on' \
  "job A's hang line" "$jobA"
served=$(cat "$tmp/B.served" 2>/dev/null || echo 0)
for _ in $(seq 1500); do
  served_at_least "$tmp/B.served" $((served + 12)) && break
  kill -0 "$jobB" || fail "(a): job B ended"
  sleep 0.2
done
served_at_least "$tmp/B.served" $((served + 12)) || fail "(a): job B's agent did not ask its own port 12 times"
stop_pid "$jobA"
stop_pid "$jobB"
stop_pid "$rasA"
stop_pid "$rasB"
show "$tmp/A.err" "$tmp/B.err"
[ "$(grep -c 'is behind in a hung collective' "$tmp/A.err")" -eq 1 ] || fail "(a): job A named the hang not once"
! grep -Eq 'hang:|hang detection' "$tmp/B.err" || fail "(a): job B spoke of a hang (job A's RAS answered it?)"
grep -q '"event": *"hang"' "$tmp/A.events" || fail "(a): no hang event in job A"

# (e) --rdzv-status shows a named hang: a one-node static job on a store of its own port (--hang-timeout 0),
# rank 1 behind; the status tool, given only the store's address, prints the agent's hang line.
eport=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$tmp/E"
PYTHON_EXEC=$host_py setsid "$trun" --nnodes 1 --node-rank 0 --master-addr 127.0.0.1 --master-port "$eport" \
  --rdzv-id job-e --nproc-per-node 2 --hang-timeout 0 --max-restarts 0 "$worker" "$tmp/E" >"$tmp/E.out" 2>"$tmp/E.err" &
jobE=$!
_bg_pgids+=("$jobE")
for r in 0 1; do wait_file "$tmp/E/pid.$r" "job E's rank $r" "$jobE"; done
ras E job-behind "$(cat "$tmp/E/ras_addr.0")" "$tmp/E" 1
rasE=$ras_pid
wait_grep "$tmp/E.err" 'hang: rank 1 \(local 1, pid [0-9]*\) is behind in a hung collective' "job E's hang line" "$jobE"
"$trun" --rdzv-status --master-addr 127.0.0.1 --master-port "$eport" --rdzv-id job-e >"$tmp/E.status" 2>&1 || true
stop_pid "$jobE"
stop_pid "$rasE"
show "$tmp/E.status"
grep -Eq '^hang: rank 1 \(local 1, pid [0-9]+\) behind on node rank 0 \(communicator 0x[0-9a-f]+ \(2 ranks\).*\): not acted on \(--hang-timeout 0\)' \
  "$tmp/E.status" || fail "(e): --rdzv-status does not show the named hang"

# (b) and (c): two agents, each node its own port; the culprit on node rank 1 (b), on node rank 0 (c).
shim=$repo/build/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run make"
# fake_gpu DIR NR: node NR's fake NVML (one GPU, its own UUID), empty sysfs / dev / DMI, its Xid file; prints
# the environment (VAR=value words) of its agent.
fake_gpu() {
  local d=$1/gpu$2
  mkdir -p "$d/sys" "$d/dev" "$d/dmi"
  : >"$d/xid"
  printf '{"gpus": [{"uuid": "GPU-7a1e0000-0000-4000-8000-00000000000%s", "name": "NVIDIA H100 80GB HBM3", "pci": "", "memory": 85520809984}]}\n' \
    "$2" >"$d/nvml.json"
  echo "TRUN_NVML_LIBRARY=$shim TRUN_FAKE_NVML_TOPO=$d/nvml.json TRUN_FAKE_NVML_XID=$d/xid TRUN_SYSFS_ROOT=$d/sys" \
    "TRUN_DEV_ROOT=$d/dev TRUN_DMI_ROOT=$d/dmi TRUN_BOOT_ID=boot-node$2 AWS_EC2_METADATA_DISABLED=true"
}
start_pair() { # start_pair NAME [MAX_RESTARTS GPUS]: GPUS 1: each node the fake NVML
  local name=$1 mport nr gpu_env
  mkdir -p "$tmp/$name"
  mport=$("$host_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for nr in 1 0; do
    gpu_env=
    [ "${3:-0}" = 1 ] && gpu_env=$(fake_gpu "$tmp/$name" $nr)
    # shellcheck disable=SC2086 # gpu_env: VAR=value words
    env $gpu_env PYTHON_EXEC=$host_py setsid "$trun" --nnodes 2 --node-rank $nr --master-addr 127.0.0.1 \
      --master-port "$mport" --rdzv-id "job-$name" --nproc-per-node 1 --hang-timeout 1 --max-restarts "${2:-0}" \
      --events "$tmp/$name$nr.events" "$worker" "$tmp/$name" >"$tmp/$name$nr.out" 2>"$tmp/$name$nr.err" &
    eval "${name}_job$nr=\$!"
    _bg_pgids+=("$!")
  done
}
start_pair b
start_pair c
start_pair d 1 1
for name in b c d; do
  eval "p0=\$${name}_job0 p1=\$${name}_job1"
  wait_file "$tmp/$name/pid.0" "($name) rank 0" "$p0"
  wait_file "$tmp/$name/pid.1" "($name) rank 1" "$p1"
  a0=$(cat "$tmp/$name/ras_addr.0")
  a1=$(cat "$tmp/$name/ras_addr.1")
  echo "($name) node rank 0: NCCL_RAS_ADDR=$a0, node rank 1: NCCL_RAS_ADDR=$a1"
  [[ $a0 =~ $addr_re && $a1 =~ $addr_re ]] || fail "($name): RAS addresses '$a0' '$a1', want 127.0.0.1:<port>"
  [ "$a0" != "$a1" ] || fail "($name): two agents on one host gave their workers one RAS port"
  behind=1
  [ "$name" = c ] && behind=0
  if [ "$name" = d ]; then
    echo "0 8" >>"$tmp/d/gpu1/xid"
    wait_grep "$tmp/d1.err" 'Xid 8' "node rank 1's Xid 8 warning" "$p1"
  fi
  ras "${name}0" job-behind "$a0" "$tmp/$name" "$behind"
  eval "${name}_ras0=\$ras_pid"
  ras "${name}1" job-behind "$a1" "$tmp/$name" "$behind"
  eval "${name}_ras1=\$ras_pid"
done
for name in b c; do
  for nr in 0 1; do
    eval "p=\$${name}_job$nr"
    rc=0
    wait "$p" || rc=$?
    eval "rc_$name$nr=$rc"
  done
  eval "stop_pid \$${name}_ras0; stop_pid \$${name}_ras1"
  show "$tmp/${name}0.err" "$tmp/${name}1.err"
done
for name in b c; do
  for nr in 0 1; do
    eval "rc=\$rc_$name$nr"
    [ "$rc" -eq 1 ] || fail "($name): node rank $nr exited $rc, want 1 (the round stopped by --hang-timeout)"
  done
done
# (d): node rank 1 leaves with the Xid as the hang's evidence; node rank 0 waits for a node: its list has it.
wait_grep "$tmp/d1.err" 'is behind in a hung collective' "(d) the hang named" "$d_job1"
rc=0
wait "$d_job1" || rc=$?
show "$tmp/d1.err"
[ $rc -eq 3 ] || fail "(d): node rank 1 exited $rc, want 3 (an Xid on the culprit's GPU: the node's trouble)"
grep -q 'Xid 8 (.*) while rank 1 hung in a collective (NCCL RAS): the hang has hardware evidence' "$tmp/d1.err" ||
  fail "(d): node rank 1 does not name the Xid with the hang"
# The exclusion record, written to the job's store (the line follows the store's answer):
grep -Eq "node [^ ]+ is excluded from job 'job-d' for [0-9]+ s: xid: GPU 0 GPU-7a1e0000-0000-4000-8000-000000000001 Xid 8 .*while rank 1 hung" "$tmp/d1.err" ||
  fail "(d): node rank 1 was not put on the job's exclusion list with kind xid"
rc=0
wait "$d_job0" || rc=$?
for nr in 0 1; do eval "stop_pid \$d_ras$nr"; done
show "$tmp/d0.err"
[ $rc -eq 1 ] || fail "(d): node rank 0 exited $rc, want 1 (static: the job ends with the node that left)"
grep -q 'Xid 8' "$tmp/d0.err" || fail "(d): node rank 0 does not name node rank 1's Xid"

# (b): node rank 1 names its rank 1, node rank 0 prints the job's report with it as the root cause.
[ "$(grep -c 'is behind in a hung collective' "$tmp/b1.err")" -eq 1 ] || fail "(b): node rank 1 named the hang not once"
! grep -q 'is behind in a hung collective' "$tmp/b0.err" || fail "(b): node rank 0 named a hang too"
expect_root b0 'rank *: 1 \(local_rank: 0\)' 'cause *: hang \(NCCL RAS\)'
# (c): node rank 0 names its rank 0; node rank 1's line names it as why its workers stopped.
[ "$(grep -c 'is behind in a hung collective' "$tmp/c0.err")" -eq 1 ] || fail "(c): node rank 0 named the hang not once"
! grep -q 'is behind in a hung collective' "$tmp/c1.err" || fail "(c): node rank 1 named a hang too"
expect_root c0 'rank *: 0 \(local_rank: 0\)' 'cause *: hang \(NCCL RAS\)'
grep -Eq 'root cause: rank 0 \(local 0, pid [0-9]+\) on [^ ]+ \(node rank 0\): hang \(NCCL RAS\)' "$tmp/c1.err" ||
  fail "(c): node rank 1 does not name node rank 0's rank 0 and the hang as the root cause"
grep -q 'node rank 1: workers stopped because another node failed first' "$tmp/c1.err" ||
  fail "(c): node rank 1 does not say another node failed first"
echo PASS

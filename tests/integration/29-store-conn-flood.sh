#!/usr/bin/env bash
# runner: alone
# A flood of connects and ends from strangers does not starve the job (test 57's idle-conns round under CPU
# load). A 2-node --rdzv-backend trun job on 127.0.0.1 (real trun agents, one gloo worker each that
# all-reduces every 0.1 s) trains; then agent 0, the store's host, goes into a cgroup of its own whose CPU
# quota is 5% of one CPU (cgroup v1 cpu controller, else v2 cpu.max; its workers stay outside, they were
# forked before), and 10,000 idle connections open to its store from 127.0.0.2-5 (tests/helpers/idle_conns.py,
# under the per-address limit) and then all close at once. The agents' liveness heartbeats (1 s, cut off
# after 6 s without an answer) must be served meanwhile: before the fix the store accepted the whole listen
# queue in one loop turn (and walked every connection for each accept, O(N^2)) and closed the whole lot of
# ended connections in one turn, its heartbeats went unanswered for 5-20 s: the store's host was cut off
# (exit 4) and the other agent's worker lost its peer (exit 1). Checks:
#  1. the store accepted every connection (the flood was real);
#  2. both agents live through the flood's connects and its ends, and name no cut-off;
#  3. training goes on after it; told to stop, both workers exit 0 and so do both agents.
# The cgroup is created and removed here (even on failure); the quota is a load, not a timed assertion. A
# host without a cgroup cpu controller fails the test (a missing capability).
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-29.XXXXXX")
pids=()
flood=""
cg=""
cg_parent=""
cleanup() {
  [ -n "$flood" ] && kill "$flood" 2>/dev/null && wait "$flood" 2>/dev/null
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    local p
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do echo "$p" >"$cg_parent/cgroup.procs" 2>/dev/null; done
    rmdir "$cg" 2>/dev/null || echo "warning: could not remove the test's cgroup $cg" >&2
  fi
  kill_marked
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# The cgroup (its files: quota and period, v1 or v2).
if [ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  cg_parent=/sys/fs/cgroup/cpu
  cg=$cg_parent/trun-29.$$
  mkdir "$cg" || fail "cannot create the cgroup $cg (cgroup v1 cpu controller)"
  echo 100000 >"$cg/cpu.cfs_period_us" && echo 5000 >"$cg/cpu.cfs_quota_us" || fail "cannot set the CPU quota of $cg"
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  cg_parent=/sys/fs/cgroup
  grep -qw cpu "$cg_parent/cgroup.subtree_control" || echo +cpu >"$cg_parent/cgroup.subtree_control" ||
    fail "cannot enable the cpu controller in $cg_parent (cgroup v2)"
  cg=$cg_parent/trun-29.$$
  mkdir "$cg" || fail "cannot create the cgroup $cg (cgroup v2)"
  echo "5000 100000" >"$cg/cpu.max" || fail "cannot set cpu.max of $cg"
else
  fail "no cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu in /sys/fs/cgroup/cgroup.controllers): the test needs one"
fi

conns=10000
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge $((conns + 1024)) ] ||
  fail "the hard fd limit $(ulimit -Hn) is under the $((conns + 1024)) the store host needs for $conns connections"
ulimit -Sn $((conns + 1024)) || fail "cannot raise the soft fd limit to $((conns + 1024))"

port=$(free_port)
mkdir -p "$tmp/out"
note "2-node trun-backend job on 127.0.0.1:$port, run id j29; cgroup $cg"
for n in 0 1; do
  "$TRUN" --nnodes 2 --rdzv-backend trun --rdzv-endpoint "127.0.0.1:$port" --rdzv-id j29 --local-addr 127.0.0.1 \
    --nproc-per-node 1 --max-restarts 0 --monitor-interval 0.1 --log-dir "$tmp/logs$n" \
    "$TRUN_REPO/tests/helpers/stop_worker.py" "$tmp/out" >"$tmp/agent$n.out" 2>"$tmp/agent$n.err" &
  pids[$n]=$!
done
dump() { for n in 0 1; do dump_agent "agent $n" "$tmp/agent$n.out" "$tmp/agent$n.err"; done; }
wait_for "[ -s '$tmp/out/step.0' ] && [ -s '$tmp/out/step.1' ]" 180 || { dump; fail "the job's workers did not all-reduce"; }
# The store's host is the agent whose store listens on the port (the first to join hosts it).
host=""
for n in 0 1; do
  if ss -Hltnp "sport = :$port" 2>/dev/null | grep -q "pid=${pids[$n]},"; then host=$n; fi
done
[ -n "$host" ] || { dump; fail "no agent listens on the store's port $port"; }
echo "${pids[$host]}" >"$cg/cgroup.procs" || fail "cannot move agent $host (pid ${pids[$host]}) into $cg"
note "agent $host hosts the store; it runs on 5% of a CPU now; $conns idle connections from 127.0.0.2-5"

fds() { ls "/proc/${pids[$host]}/fd" 2>/dev/null | wc -l; }
fd0=$(fds)
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
alive() { kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null; }
"$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/idle_conns.py" 127.0.0.1 "$port" $conns "$tmp/flood.log" \
  127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5 &
flood=$!
wait_for "grep -q '^open' '$tmp/flood.log' 2>/dev/null || ! kill -0 $flood 2>/dev/null || ! alive" 300
echo "flood: $(tr '\n' ';' <"$tmp/flood.log" 2>/dev/null)"
# 1. Every connection was accepted.
[ "$(sed -n 's/^open //p' "$tmp/flood.log")" = $conns ] || bad "1: the store did not hold all $conns connections"
# All close at once; the store ends them while the heartbeats go on: its fd count back to where it was
# before the flood (a few more for the liveness connections' reconnects at most) is the end of the ends.
kill -TERM "$flood"
wait "$flood"
flood=""
wait_for "[ \$(fds) -le $((fd0 + 8)) ] || ! alive" 300 || bad "2: the store host holds $(fds) fds, $fd0 before the flood"
# 2. Both agents lived through it.
for n in 0 1; do
  kill -0 "${pids[$n]}" 2>/dev/null || bad "2: agent $n ended during the flood"
  grep -E -q "cut off|no answer for" "$tmp/agent$n.err" && bad "2: agent $n names a cut-off: $(grep -E -m1 'cut off|no answer for' "$tmp/agent$n.err")"
done
# Out of the cgroup: the end of the job is not what this test is about.
echo "${pids[$host]}" >"$cg_parent/cgroup.procs" 2>/dev/null

# 3. Training goes on after the flood, and the job ends well.
s0=$(cat "$tmp/out/step.0" 2>/dev/null || echo 0)
progress() { [ "$(cat "$tmp/out/step.0" 2>/dev/null || echo 0)" -gt $((s0 + 5)) ]; }
wait_for "progress || ! alive" 120
progress || bad "3: the workers made no progress after the flood"
touch "$tmp/out/stop"
wait_agents 180 60 stop_worker.py "${pids[0]}" "${pids[1]}" || bad "3: the agents did not both exit"
for n in 0 1; do
  rc=${AGENT_RC[${pids[$n]}]:-?}
  [ "$rc" = 0 ] || bad "3: agent $n exited $rc, want 0"
done
if [ $failures -gt 0 ]; then
  dump
  exit 1
fi
echo "PASS: 10,000 connections opened and closed against a store host on 5% of a CPU: no agent cut off, training went on, both agents exit 0"

#!/usr/bin/env bash
# Elastic membership in network namespaces (issue 4), for trun's c10d backend (torchelastic's algorithm) and
# its `trun` backend: --nnodes 2:3, one trun agent per namespace (10.251.0.1..3), 1 worker each
# (tests/helpers/elastic_worker.py: gloo, all-reduces until told to finish).
#   1. h0 + h1 start: a world of 2 after the last call.
#   2. h2 joins: every node restarts into a world of 3, not counted as a restart (restart count stays 0).
#   3. h2's agent is SIGKILLed: the survivors go on in a world of 2 (its heartbeat expires: 1 s x 3).
#   4. h1's link goes down: h0 is below MIN, waits up to join_timeout (10 s) and exits 1 naming the time-out.
# Skips (77) only when network namespaces cannot be created here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch
need_cmd ip iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-66.XXXXXX")
br=trunbe-$$
hosts=(trune0-$$ trune1-$$ trune2-$$)
declare -A pid
cleanup() {
  kill_marked
  for ns in "${hosts[@]}" "$br"; do ip netns del "$ns" 2>/dev/null; done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
make_netns_hosts 10.251.0 3 "$br" "${hosts[@]}"

# worlds OUT W: how many workers recorded a world of W (files written since the last clear)
worlds() { cat "$1"/world.* 2>/dev/null | awk -v w="$2" '$1 == w' | wc -l; }

run_backend() { # backend port
  local be=$1 port=$2 out=$tmp/$1 i
  mkdir -p "$out"
  start() { # node
    EL_HOST=h$1 MN_OUT=$out GLOO_SOCKET_IFNAME=eth0 ip netns exec "${hosts[$1]}" "$TRUN" --nnodes 2:3 \
      --nproc-per-node 1 --rdzv-backend "$be" --rdzv-endpoint "10.251.0.1:$port" --rdzv-id "el-$be" \
      --rdzv-conf join_timeout=10,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3 \
      --local-addr "10.251.0.$(($1 + 1))" --max-restarts 5 --monitor-interval 0.5 --log-dir "$out/logs$1" \
      "$TRUN_REPO/tests/helpers/elastic_worker.py" "$out" >"$out/agent$1.out" 2>"$out/agent$1.err" &
    pid[$1]=$!
  }
  dump() { for i in 0 1 2; do dump_agent "$be agent $i" "$out/agent$i.out" "$out/agent$i.err"; done; }

  note "$be: h0 and h1 start"
  start 0
  start 1
  wait_for "[ \$(worlds $out 2) -ge 2 ]" 90 || { dump; fail "$be: h0 + h1 did not form a world of 2"; }

  note "$be: h2 joins"
  rm -f "$out"/world.*
  start 2
  wait_for "[ \$(worlds $out 3) -ge 3 ]" 90 || { dump; fail "$be: no world of 3 after h2 joined"; }
  awk '$3 != 0 {bad=1} END {exit bad}' "$out"/world.* ||
    { cat "$out"/world.*; fail "$be: joining counted as a restart (TORCHELASTIC_RESTART_COUNT != 0)"; }

  note "$be: h2's agent is killed"
  rm -f "$out"/world.*
  kill -KILL "${pid[2]}"
  wait "${pid[2]}" 2>/dev/null
  wait_for "[ \$(worlds $out 2) -ge 2 ]" 90 || { dump; fail "$be: h0 + h1 did not go on as a world of 2"; }
  [ "$(cat "$out"/world.* | awk '$1 == 2' | wc -l)" -ge 2 ] || fail "$be: survivors"

  note "$be: h1's link goes down"
  ip -n "${hosts[1]}" link set eth0 down || fail "link down"
  local t0; t0=$(now)
  wait_pid_exit "${pid[0]}" 120 || { dump; fail "$be: h0 still runs 120 s after h1's link went down"; }
  local rc=$WAIT_RC
  echo "$be: h0 exited $rc after $(elapsed "$t0") s"
  [ "$rc" = 1 ] || { dump; fail "$be: h0 exited $rc below MIN, want 1"; }
  grep -Eq "timed out|join timeout" "$out/agent0.err" ||
    { dump; fail "$be: h0's exit does not name the rendezvous time-out"; }
  grep -E "timed out|join timeout" "$out/agent0.err" | tail -n 1
  kill -KILL "${pid[1]}" 2>/dev/null
  wait "${pid[1]}" 2>/dev/null
  ip -n "${hosts[1]}" link set eth0 up
  kill_marked
  echo "ok: $be: 2 -> 3 (no restart counted) -> SIGKILL -> 2 -> link down -> below MIN, exit 1"
}

run_backend c10d 29661
run_backend trun 29662
echo "PASS: elastic membership with the c10d and trun backends in network namespaces"

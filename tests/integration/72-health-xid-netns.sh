#!/usr/bin/env bash
# A hardware Xid in the middle of a 3-node elastic job in network namespaces (10.253.0.1..3, --nnodes 2:3,
# 1 worker each: tests/helpers/elastic_worker.py, gloo), for the c10d and trun backends. GPUs come from the
# fake NVML, one per node (tests/helpers/health_lib.sh); its Xid file injects the event.
#   1. h0, h1, h2 start: a world of 3.
#   2. Xid 79 on the GPU of a node that is not node rank 0: that agent names it ("GPU 0 <UUID> Xid 79: GPU has
#      fallen off the bus") as the root cause of its failure report, stops its worker and exits 3.
#   3. The survivors restart into a world of 2; the one that was node rank 0 names the Xid and the node that
#      left on stderr, and its "remote_failure" event has the Xid as the root cause on that node (the
#      "failure" event is the Xid node's own).
#   4. An application's Xid (13) on a survivor is logged and changes nothing; the workers finish, exit 0.
# Assertions are on outcomes, not times. Skips (77) only when network namespaces cannot be created here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/health_lib.sh"
need_torch
need_cmd ip iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-72.XXXXXX")
br=trunhx-$$
hosts=(trunhx0-$$ trunhx1-$$ trunhx2-$$)
declare -A pid
cleanup() {
  kill_marked
  for ns in "${hosts[@]}" "$br"; do ip netns del "$ns" 2>/dev/null; done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
make_netns_hosts 10.253.0 3 "$br" "${hosts[@]}"

worlds() { cat "$1"/world.* 2>/dev/null | awk -v w="$2" '$1 == w' | wc -l; }

run_backend() { # backend port
  local be=$1 port=$2 out=$tmp/$1 i
  mkdir -p "$out"
  for i in 0 1 2; do health_node "$out" "$i" '{}'; done
  start() { # node
    # shellcheck disable=SC2046
    env $(health_env "$out" "$1") EL_HOST=h$1 MN_OUT="$out" GLOO_SOCKET_IFNAME=eth0 \
      ip netns exec "${hosts[$1]}" "$TRUN" --nnodes 2:3 --nproc-per-node 1 --rdzv-backend "$be" \
      --rdzv-endpoint "10.253.0.1:$port" --rdzv-id "hx-$be" \
      --rdzv-conf join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3 \
      --local-addr "10.253.0.$(($1 + 1))" --max-restarts 3 --monitor-interval 0.5 --log-dir "$out/logs$1" \
      --events "$out/events$1" "$TRUN_REPO/tests/helpers/elastic_worker.py" "$out" \
      >"$out/agent$1.out" 2>"$out/agent$1.err" &
    pid[$1]=$!
  }
  dump() { for i in 0 1 2; do dump_agent "$be agent $i" "$out/agent$i.out" "$out/agent$i.err"; done; }

  note "$be: h0, h1, h2 start"
  for i in 0 1 2; do start $i; done
  wait_for "[ \$(worlds $out 3) -ge 3 ]" 90 || { dump; fail "$be: no world of 3"; }
  local r0; r0=$(rank0_host "$out" 3) || fail "$be: no rank 0 in the world files"
  local bad=2
  [ "$r0" != h2 ] || bad=1
  local uuid=GPU-7a1e0000-0000-4000-8000-00000000000$bad
  note "$be: Xid 79 on h$bad's GPU (node rank 0 is $r0)"
  rm -f "$out"/world.*
  echo "0 79" >>"$out/node$bad/xid"
  wait_pid_exit "${pid[$bad]}" 90 || { dump; fail "$be: h$bad still runs 90 s after its Xid"; }
  [ "$WAIT_RC" = 3 ] || { dump; fail "$be: h$bad exited $WAIT_RC after a hardware Xid, want 3"; }
  local e=$out/agent$bad.err
  grep -q "trun: error: GPU 0 $uuid Xid 79: GPU has fallen off the bus: node 10.253.0.$((bad + 1)) leaves the job and exits 3" "$e" ||
    { dump; fail "$be: h$bad does not name the Xid"; }
  grep -A8 "^Root Cause" "$e" | grep -q "traceback : GPU 0 $uuid Xid 79: GPU has fallen off the bus" ||
    { dump; fail "$be: h$bad's failure report does not give the Xid as the root cause"; }

  note "$be: the survivors go on in a world of 2"
  wait_for "[ \$(worlds $out 2) -ge 2 ]" 120 || { dump; fail "$be: the survivors did not form a world of 2"; }
  local n0=${r0#h}
  grep -q "trun: health: node 10.253.0.$((bad + 1)) (node rank [0-9]*, exit 3) left the job: GPU 0 $uuid Xid 79: GPU has fallen off the bus" \
    "$out/agent$n0.err" || { dump; fail "$be: node rank 0 ($r0) does not name the Xid and the node"; }
  grep "left the job" "$out/agent$n0.err" | head -n 1
  "$TRUN_HOST_PY" - "$out/events$n0" "10.253.0.$((bad + 1))" "$uuid" <<'PY' || { dump; fail "$be: node rank 0's events"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert not [e for e in ev if e["event"] == "failure"], "the root cause is another node's: no failure event here"
fail = [e for e in ev if e["event"] == "remote_failure"]
assert fail and fail[0]["root_host"] == sys.argv[2] and fail[0]["known"], fail
assert fail[0]["message"] == "GPU 0 %s Xid 79: GPU has fallen off the bus" % sys.argv[3], fail[0]
assert fail[0]["exit_code"] == 3, fail[0]
bad = [e for e in ev if e["event"] == "node_unhealthy"]
assert len(bad) == 1 and bad[0]["root_host"] == sys.argv[2], bad
PY
  "$TRUN_HOST_PY" - "$out/events$bad" <<'PY' || { dump; fail "$be: the Xid node's events"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
x = [e for e in ev if e["event"] == "xid"]
assert len(x) == 1 and x[0]["xid"] == 79 and x[0]["hardware"] and x[0]["action"] == "leave", x
assert [e["code"] for e in ev if e["event"] == "job_end"] == [3], ev[-1]
PY

  note "$be: an application's Xid on a survivor changes nothing; the workers finish"
  echo "0 13" >>"$out/node$n0/xid"
  wait_for "grep -q 'Xid 13: graphics engine exception' $out/agent$n0.err" 30 ||
    { dump; fail "$be: Xid 13 was not logged"; }
  touch "$out/finish"
  for i in 0 1 2; do
    [ "$i" = "$bad" ] && continue
    wait_pid_exit "${pid[$i]}" 90 || { dump; fail "$be: h$i still runs after finish"; }
    [ "$WAIT_RC" = 0 ] || { dump; fail "$be: h$i exited $WAIT_RC, want 0"; }
  done
  kill_marked
  echo "ok: $be: Xid 79 on h$bad: it left with exit 3, the survivors finished as a world of 2, $r0 named it"
}

run_backend c10d 29681
run_backend trun 29682
echo "PASS: a hardware Xid takes its node out of c10d and trun elastic jobs, named as the root cause"

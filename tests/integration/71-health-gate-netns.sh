#!/usr/bin/env bash
# The node health gate (--health-check fail) in a 3-node elastic job in network namespaces (10.252.0.1..3,
# --nnodes 2:3, 1 worker each: tests/helpers/elastic_worker.py, gloo), for the c10d and trun backends. GPUs
# come from the fake NVML, one per node (tests/helpers/health_lib.sh); node 2's has 2 volatile uncorrected ECC
# errors.
#   1. h0 starts (it hosts the rendezvous store), then h2: h2's gate fails, it exits 3 before joining and says
#      so, naming the check; then h1: the job runs on h0 + h1, a world of 2.
#   2. The agent that is node rank 0 names h2 and the check on stderr (the record h2 left in the store), and
#      its event stream has "health" events for every check and a "node_unhealthy" event for h2.
#   3. The workers finish: h0 and h1 exit 0.
#   4. Bad input: an unknown --health-check mode and a --health-checks list that names nothing exit 2.
# Assertions are on outcomes, not times. Skips (77) only when network namespaces cannot be created here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/health_lib.sh"
need_torch
need_cmd ip iproute2
need_cmd ss iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-71.XXXXXX")
br=trunhg-$$
hosts=(trunhg0-$$ trunhg1-$$ trunhg2-$$)
declare -A pid
cleanup() {
  kill_marked
  for ns in "${hosts[@]}" "$br"; do ip netns del "$ns" 2>/dev/null; done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
make_netns_hosts 10.252.0 3 "$br" "${hosts[@]}"
health_node "$tmp" 0 '{}'
health_node "$tmp" 1 '{}'
health_node "$tmp" 2 '{"ecc_volatile_uncorrected": 2}'

worlds() { cat "$1"/world.* 2>/dev/null | awk -v w="$2" '$1 == w' | wc -l; }

run_backend() { # backend port
  local be=$1 port=$2 out=$tmp/$1 i
  mkdir -p "$out"
  start() { # node
    # shellcheck disable=SC2046
    env $(health_env "$tmp" "$1") EL_HOST=h$1 MN_OUT="$out" GLOO_SOCKET_IFNAME=eth0 \
      ip netns exec "${hosts[$1]}" "$TRUN" --nnodes 2:3 --nproc-per-node 1 --rdzv-backend "$be" \
      --rdzv-endpoint "10.252.0.1:$port" --rdzv-id "hg-$be" --health-check fail \
      --rdzv-conf join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3 \
      --local-addr "10.252.0.$(($1 + 1))" --max-restarts 2 --monitor-interval 0.5 --log-dir "$out/logs$1" \
      --events "$out/events$1" "$TRUN_REPO/tests/helpers/elastic_worker.py" "$out" \
      >"$out/agent$1.out" 2>"$out/agent$1.err" &
    pid[$1]=$!
  }
  dump() { for i in 0 1 2; do dump_agent "$be agent $i" "$out/agent$i.out" "$out/agent$i.err"; done; }

  note "$be: h0 starts and hosts the store; h2 fails its gate"
  start 0
  wait_for "listening ${hosts[0]} $port" 60 || { dump; fail "$be: h0 does not serve the rendezvous store"; }
  start 2
  wait_pid_exit "${pid[2]}" 60 || { dump; fail "$be: h2 still runs 60 s after its gate failed"; }
  [ "$WAIT_RC" = 3 ] || { dump; fail "$be: h2 exited $WAIT_RC, want 3 (unhealthy)"; }
  grep -q "trun: health: FAIL ecc \[GPU 0 GPU-7a1e0000-0000-4000-8000-000000000002: 2\]" "$out/agent2.err" ||
    { dump; fail "$be: h2 does not name the failed check"; }
  grep -q "node 10.252.0.3 does not join the job (--health-check=fail); exit 3" "$out/agent2.err" ||
    { dump; fail "$be: h2 does not say it stays out"; }
  ! ls "$out"/world.h2.* >/dev/null 2>&1 || fail "$be: h2 started a worker"

  note "$be: h1 joins: the job runs on 2"
  start 1
  wait_for "[ \$(worlds $out 2) -ge 2 ]" 90 || { dump; fail "$be: h0 + h1 did not form a world of 2"; }
  local r0; r0=$(rank0_host "$out" 2) || fail "$be: no rank 0 in the world files"
  local n0=${r0#h}
  wait_for "grep -q 'left the job' $out/agent$n0.err" 30 ||
    { dump; fail "$be: node rank 0 ($r0) does not name the node that stayed out"; }
  grep "left the job" "$out/agent$n0.err"
  grep -q "trun: health: node 10.252.0.3 (exit 3) left the job: failed the health gate (--health-check=fail): FAIL ecc \[GPU 0 GPU-7a1e0000-0000-4000-8000-000000000002: 2\]" \
    "$out/agent$n0.err" || { dump; fail "$be: node rank 0's line does not name h2 and the ecc check"; }
  local other=$((1 - n0))
  ! grep -q "left the job" "$out/agent$other.err" || fail "$be: the node that is not rank 0 printed it too"
  "$TRUN_HOST_PY" - "$out/events$n0" <<'PY' || { dump; fail "$be: node rank 0's events"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
health = [e for e in ev if e["event"] == "health"]
assert len(health) == 12 and all(e["status"] in ("pass", "skip", "warn") for e in health), health
assert {"name", "status", "value", "threshold", "reason"} <= set(health[0]), health[0]
bad = [e for e in ev if e["event"] == "node_unhealthy"]
assert len(bad) == 1 and bad[0]["root_host"] == "10.252.0.3" and "FAIL ecc" in bad[0]["message"], bad
PY

  note "$be: the workers finish"
  touch "$out/finish"
  for i in 0 1; do
    wait_pid_exit "${pid[$i]}" 90 || { dump; fail "$be: h$i still runs after finish"; }
    [ "$WAIT_RC" = 0 ] || { dump; fail "$be: h$i exited $WAIT_RC, want 0"; }
  done
  kill_marked
  echo "ok: $be: h2 stayed out (exit 3), the job ran on 2, node rank 0 ($r0) named h2 and the ecc check"
}

run_backend c10d 29671
run_backend trun 29672

note "bad input exits 2"
rc=0
"$TRUN" --health-check maybe --no-python /bin/true >"$tmp/bad.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "must be off, warn or fail" "$tmp/bad.out" || fail "--health-check maybe: exit $rc: $(cat "$tmp/bad.out")"
rc=0
"$TRUN" --health-checks , --no-python /bin/true >"$tmp/bad.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "the list names no check" "$tmp/bad.out" || fail "--health-checks ,: exit $rc: $(cat "$tmp/bad.out")"
rc=0
TRUN_HEALTH_CHECKS=-nvml,nvml "$TRUN" --no-python /bin/true >"$tmp/bad.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "leaves no check" "$tmp/bad.out" || fail "TRUN_HEALTH_CHECKS=-nvml,nvml: exit $rc: $(cat "$tmp/bad.out")"
echo "PASS: the health gate keeps a failing node out of c10d and trun elastic jobs, named by node rank 0"

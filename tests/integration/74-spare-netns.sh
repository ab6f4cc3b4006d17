#!/usr/bin/env bash
# Spares (issue 30), in network namespaces (10.252.0.1..4): four trun agents with --nnodes 3:3 (nodes 0-2
# train, node 3 is started once they do and waits as a spare), one gloo worker each doing an all-reduce
# every 0.1 s (tests/helpers/loop_worker.py, torch 1.13), --max-restarts 3, for the c10d and the trun backends:
#   1. crash: every process of node 2 is SIGKILLed;
#   2. silent: node 2's link goes down (it is cut off and exits 4).
#   3. a mixed c10d fleet (--rdzv-conf torch_version=1.13): trun agents on nodes 0-2, a torchrun 1.13 agent
#      as the spare; node 2 crashes and the torchrun spare trains with the two trun survivors. torchrun keeps
#      its own count (its worker gets 0, trun's the job's 1): torch 1.13's c10d workers serve their own
#      store (worker rank 0) and do not key by the count, so the group forms.
# Each time the spare takes node 2's place: nodes 0, 1 and 3 train again in a world of 3, and every worker of
# that round got the same TORCHELASTIC_RESTART_COUNT, the job's attempt (1), the spare's included: torch's
# workers on the agents' store key their rendezvous by it (/worker/attempt_<n>), so one differing count
# keeps the group from forming. Before the loss the test waits for the trun spare's "waiting" event of kind
# spare (its first report, 1 s into its wait), so it waits when node 2 goes; by then the nodes that train would
# have said "new node(s) wait to join" had they taken it into their round. The torchrun spare of part 3 says
# nothing of the kind: a sleep only makes it likely that it waits; a spare arriving later is a late joiner,
# and the checks are the same.
# Times are printed, not asserted (make bench measures them). By hand, SPARE_BACKENDS / SPARE_KINDS narrow
# parts 1-2 and SPARE_ONLY=1 skips 3. Skips (77) only when namespaces cannot be made.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch
need_cmd ip iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-74.XXXXXX")
br=trunbr74-$$
hosts=(truns0-$$ truns1-$$ truns2-$$ truns3-$$)
declare -A pid
cleanup() {
  kill_marked
  del_netns_hosts "$br" "${hosts[@]}"
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
make_netns_hosts 10.252.0 4 "$br" "${hosts[@]}"

# start NODE BACKEND OUT ID [extra trun options]: one agent in node NODE's namespace.
start() {
  local n=$1 be=$2 out=$3 id=$4
  shift 4
  LOOP_OUT=$out GLOO_SOCKET_IFNAME=eth0 ip netns exec "${hosts[$n]}" "$TRUN" --nnodes 3:3 --nproc-per-node 1 \
    --rdzv-backend "$be" --rdzv-endpoint "10.252.0.1:$port" --rdzv-id "$id" --local-addr "10.252.0.$((n + 1))" \
    --max-restarts 3 --log-dir "$out/logs$n" --events "$out/ev$n.jsonl" "$@" \
    "$TRUN_REPO/tests/helpers/loop_worker.py" >"$out/agent$n.out" 2>"$out/agent$n.err" &
  pid[$n]=$!
}
# lines OUT NODE WORLD: how many worker rounds of node NODE printed "ready" in a world of WORLD
lines() { grep -c "LOOP rank [0-9]*/$3 attempt" "$1/agent$2.out" 2>/dev/null; }
# last_attempt OUT NODE: the attempt of node NODE's last worker that got ready
last_attempt() { grep "LOOP rank .* attempt" "$1/agent$2.out" | tail -n1 | sed 's/.* attempt \([0-9]*\) .*/\1/'; }
dump() { for n in 0 1 2 3; do dump_agent "agent $n" "$1/agent$n.out" "$1/agent$n.err"; done; }
# spare_waits OUT: node 3's agent wrote a "waiting" event of kind spare
spare_waits() {
  "$TRUN_HOST_PY" -c 'import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if any(e.get("event") == "waiting" and e.get("wait") == "spare" for e in evs) else 1)' "$1/ev3.jsonl" 2>/dev/null
}
kill_node() { ip netns pids "${hosts[$1]}" | xargs -r kill -KILL; }
stop_all() { # OUT NODES...
  local out=$1 n
  shift
  for n in "$@"; do kill -TERM "${pid[$n]}" 2>/dev/null; done
  for n in "$@"; do wait_pid_exit "${pid[$n]}" 60 || { dump "$out"; fail "agent $n did not stop on SIGTERM"; }; done
}

port=29740
scenario() { # BACKEND KIND
  local be=$1 kind=$2 out=$tmp/$1-$2 t0 n a
  port=$((port + 1))
  mkdir -p "$out"
  note "$be, $kind: three nodes and a spare"
  for n in 0 1 2; do start $n "$be" "$out" "spare-$be-$kind"; done
  wait_for '[ "$(lines $out 0 3)" -ge 1 ] && [ "$(lines $out 1 3)" -ge 1 ] && [ "$(lines $out 2 3)" -ge 1 ]' 120 ||
    { dump "$out"; fail "$be $kind: no world of 3"; }
  start 3 "$be" "$out" "spare-$be-$kind"
  wait_for "spare_waits $out" 60 || { dump "$out"; fail "$be $kind: node 3 did not report waiting as a spare"; }
  [ "$(lines "$out" 3 3)" = 0 ] || { dump "$out"; fail "$be $kind: the spare (node 3) ran workers in a full round"; }
  for n in 0 1 2; do
    [ "$(lines "$out" $n 3)" = 1 ] || { dump "$out"; fail "$be $kind: node $n restarted its workers for a spare"; }
    ! grep -q "new node(s) wait to join" "$out/agent$n.err" ||
      { dump "$out"; fail "$be $kind: node $n took the spare into its round"; }
  done
  t0=$(now)
  if [ "$kind" = crash ]; then
    kill_node 2
  else
    ip -n "$br" link set vb2 down || fail "link down"
  fi
  wait_for '[ "$(lines $out 0 3)" -ge 2 ] && [ "$(lines $out 1 3)" -ge 2 ] && [ "$(lines $out 3 3)" -ge 1 ]' 120 || {
    dump "$out"
    for n in 0 1 3; do note "node $n: last worker attempt $(last_attempt "$out" $n)"; done
    fail "$be $kind: nodes 0, 1 and the spare 3 did not train together in a world of 3"
  }
  note "$be, $kind: the spare trains with the survivors in a world of 3 after $(elapsed "$t0") s"
  for n in 0 1 3; do
    a=$(last_attempt "$out" $n)
    [ "$a" = 1 ] || { dump "$out"; fail "$be $kind: node $n's worker got TORCHELASTIC_RESTART_COUNT=$a, want the job's attempt 1"; }
  done
  grep '"event":"recovered"' "$out/ev3.jsonl" >/dev/null 2>&1 || grep -q '"event":"recovered"' "$out/ev0.jsonl" ||
    { cat "$out/ev0.jsonl"; fail "$be $kind: no recovered event"; }
  if [ "$kind" = silent ]; then
    wait_pid_exit "${pid[2]}" 60 || { dump "$out"; fail "$be silent: the cut-off node 2 did not exit"; }
    [ "$WAIT_RC" = 4 ] || { dump "$out"; fail "$be silent: the cut-off node exited $WAIT_RC, want 4"; }
    ip -n "$br" link set vb2 up
  fi
  stop_all "$out" 0 1 3
}

for be in ${SPARE_BACKENDS-c10d trun}; do
  for kind in ${SPARE_KINDS-crash silent}; do scenario "$be" "$kind"; done
done
[ -n "${SPARE_ONLY:-}" ] && { echo PASS; exit 0; }

# ---- 3. c10d with a torchrun 1.13 spare ----
out=$tmp/mixed
mkdir -p "$out"
port=29749
for n in 0 1 2; do start $n c10d "$out" spare-mixed --rdzv-conf torch_version=1.13; done
wait_for '[ "$(lines $out 0 3)" -ge 1 ] && [ "$(lines $out 1 3)" -ge 1 ] && [ "$(lines $out 2 3)" -ge 1 ]' 120 ||
  { dump "$out"; fail "mixed: no world of 3"; }
LOOP_OUT=$out GLOO_SOCKET_IFNAME=eth0 ip netns exec "${hosts[3]}" "$TRUN_HOST_PY" "$TRUN_REPO/tests/tools/torchrun113.py" \
  --nnodes 3:3 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint 10.252.0.1:$port --rdzv_id spare-mixed \
  --rdzv_conf is_host=0 --max_restarts 3 --monitor_interval 0.1 \
  "$TRUN_REPO/tests/helpers/loop_worker.py" >"$out/agent3.out" 2>"$out/agent3.err" &
pid[3]=$!
sleep 5
[ "$(lines "$out" 3 3)" = 0 ] || { dump "$out"; fail "mixed: the torchrun spare ran workers in a full round"; }
t0=$(now)
kill_node 2
wait_for '[ "$(lines $out 0 3)" -ge 2 ] && [ "$(lines $out 1 3)" -ge 2 ] && [ "$(lines $out 3 3)" -ge 1 ]' 120 ||
  { dump "$out"; fail "mixed: the trun survivors and the torchrun spare did not train together in a world of 3"; }
note "mixed c10d: trun survivors + torchrun 1.13 spare training in a world of 3 after $(elapsed "$t0") s;" \
  "attempts: trun $(last_attempt "$out" 0) $(last_attempt "$out" 1), torchrun $(last_attempt "$out" 3)"
for n in 0 1; do
  [ "$(last_attempt "$out" $n)" = 1 ] || { dump "$out"; fail "mixed: trun node $n's worker is not at attempt 1"; }
done
stop_all "$out" 0 1 3
echo PASS

#!/usr/bin/env bash
# The workers' MASTER_ADDR checked before they start, and --local-addr auto, on 2 "hosts": network namespaces
# 10.249.0.1 and .2 on a bridge (mn_lib.sh), each with an /etc/hosts of its own (ip netns exec mounts
# /etc/netns/<ns>/hosts) that names only itself, as containers or pods without DNS for each other.
#  1. c10d, each node's --local-addr a name only its own namespace resolves: node rank 0 publishes its name as
#     MASTER_ADDR; the other node says it does not resolve there, with the fix (--local-addr auto, a headless
#     Service), and exits 1; node rank 0 stops too (exit 1) and names the cause: no worker hangs in torch's
#     30-minute retry (a safety limit of 60 s).
#  2. c10d with --local-addr auto on one node and PET_LOCAL_ADDR=auto on the other: each goes by its
#     address (said on stderr), and a gloo all-reduce (examples/allreduce.py, torch 1.13) runs in a world of 2.
#  3. The trun backend, the same.
#  4. c10d, --local-addr localhost on both: MASTER_ADDR resolves to loopback on the node that does not serve
#     the workers' store; it says so (nothing serves port N there) and exits 1, the other exits 1.
#  5. The same two agents in one namespace: localhost leads to the store there; both exit 0.
#  6. Bad input: an empty --local-addr or PET_LOCAL_ADDR exits 2 naming it.
# Skips (77) only when network namespaces cannot be created here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch
need_cmd ip iproute2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-73.XXXXXX")
br=trunma-$$
hosts=(trunma0-$$ trunma1-$$)
pids=()
cleanup() {
  kill_marked
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for ns in "${hosts[@]}" "$br"; do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
    rmdir /etc/netns 2>/dev/null
  done
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
make_netns_hosts 10.249.0 2 "$br" "${hosts[@]}"
names=(trun73a-$$ trun73b-$$)
for i in 0 1; do
  mkdir -p "/etc/netns/${hosts[$i]}" || fail "cannot create /etc/netns/${hosts[$i]}"
  printf '127.0.0.1\tlocalhost\n10.249.0.%d\t%s\n' $((i + 1)) "${names[$i]}" >"/etc/netns/${hosts[$i]}/hosts"
done
ip netns exec "${hosts[0]}" getent hosts "${names[0]}" >/dev/null || fail "${names[0]} does not resolve in its namespace"
! ip netns exec "${hosts[1]}" getent hosts "${names[0]}" >/dev/null || fail "${names[0]} resolves in the other namespace"

# agent TAG NS_INDEX ENV... -- TRUN_ARGS...: one agent in namespace NS_INDEX (its own if "", else shared).
agent() {
  local tag=$1 ns=$2 envs=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  ip netns exec "${hosts[$ns]}" env "${envs[@]}" GLOO_SOCKET_IFNAME=eth0 "$TRUN" --nnodes 2 --nproc-per-node 1 \
    --monitor-interval 0.2 "$@" >"$tmp/$tag.out" 2>"$tmp/$tag.err" &
  pids+=($!)
}
both() { # tag0 tag1: waits (safety limit 120 s), dumps their output
  local ok=1
  wait_agents 120 60 "${WORD:-allreduce}" "${pids[@]}" || ok=0
  dump_agent "$1" "$tmp/$1.out" "$tmp/$1.err"
  dump_agent "$2" "$tmp/$2.out" "$tmp/$2.err"
  [ $ok = 1 ] || fail "the agents did not both exit"
}
rc_of() { echo "${AGENT_RC[${pids[$1]}]}"; }

echo "== 1. c10d, names each node alone resolves: stopped at once"
pids=()
port=29731
t0=$(now)
for i in 0 1; do
  agent n$i $i -- --rdzv-backend c10d --rdzv-endpoint "10.249.0.1:$port" --rdzv-id ma1 --local-addr "${names[$i]}" \
    --no-python /bin/sleep 300
done
WORD=sleep both n0 n1
echo "both stopped $(elapsed "$t0") s after they started"
for i in 0 1; do [ "$(rc_of $i)" = 1 ] || fail "1: agent n$i exited $(rc_of $i), want 1"; done
bad=$(grep -l "the workers' MASTER_ADDR 'trun73[ab]-$$' does not resolve on this node" "$tmp"/n[01].err)
[ -n "$bad" ] && [ "$(wc -l <<<"$bad")" = 1 ] || fail "1: want the error from exactly one agent"
grep -q "Run every node with --local-addr auto (PET_LOCAL_ADDR=auto" "$bad" || fail "1: the error lacks the fix"
other=$tmp/n0.err
[ "$bad" = "$tmp/n0.err" ] && other=$tmp/n1.err
grep -q "is lost: it left the job: its workers could not use MASTER_ADDR trun73[ab]-$$ there" "$other" ||
  fail "1: the other agent does not name the cause"
echo "ok 1"

# auto_run PART BACKEND PORT TAG: 2 agents, --local-addr auto on node 0 and PET_LOCAL_ADDR=auto on node 1, an
# all-reduce in a world of 2; each says its address.
auto_run() {
  local part=$1 be=$2 port=$3 tag=$4 i
  pids=()
  agent ${tag}0 0 -- --rdzv-backend "$be" --rdzv-endpoint "10.249.0.1:$port" --rdzv-id "ma$part" --local-addr auto \
    "$TRUN_REPO/examples/allreduce.py"
  agent ${tag}1 1 PET_LOCAL_ADDR=auto -- --rdzv-backend "$be" --rdzv-endpoint "10.249.0.1:$port" --rdzv-id "ma$part" \
    "$TRUN_REPO/examples/allreduce.py"
  both ${tag}0 ${tag}1
  for i in 0 1; do
    [ "$(rc_of $i)" = 0 ] || fail "$part: agent $tag$i exited $(rc_of $i)"
    grep -q "trun: info: --local-addr auto: this node is 10.249.0.$((i + 1)) (" "$tmp/$tag$i.err" ||
      fail "$part: $tag$i does not say its address"
  done
  [ "$(cat "$tmp/${tag}0.out" "$tmp/${tag}1.out" | grep -c "/2 .*OK")" = 2 ] || fail "$part: want 2 ranks of a world of 2 OK"
}

echo "== 2. c10d, --local-addr auto / PET_LOCAL_ADDR=auto: a world of 2"
auto_run 2 c10d 29732 a
echo "ok 2"

echo "== 3. trun backend, the same"
auto_run 3 trun 29733 t
echo "ok 3"

echo "== 4. c10d, --local-addr localhost on 2 hosts: loopback elsewhere"
pids=()
for i in 0 1; do
  agent l$i $i -- --rdzv-backend c10d --rdzv-endpoint 10.249.0.1:29734 --rdzv-id ma4 --local-addr localhost \
    --no-python /bin/sleep 300
done
WORD=sleep both l0 l1
for i in 0 1; do [ "$(rc_of $i)" = 1 ] || fail "4: agent l$i exited $(rc_of $i), want 1"; done
grep -q "the workers' MASTER_ADDR 'localhost' resolves to the loopback address 127.0.0.1 on this node (localhost, node rank 1), where nothing serves the workers' store (port [0-9]*)" \
  "$tmp"/l[01].err || fail "4: no loopback error from node rank 1"
echo "ok 4"

echo "== 5. the same in one namespace: localhost is right there"
pids=()
for i in 0 1; do
  agent s$i 0 -- --rdzv-backend c10d --rdzv-endpoint 10.249.0.1:29735 --rdzv-id ma5 --local-addr localhost \
    "$TRUN_REPO/examples/allreduce.py"
done
both s0 s1
for i in 0 1; do [ "$(rc_of $i)" = 0 ] || fail "5: agent s$i exited $(rc_of $i)"; done
! grep -q "MASTER_ADDR" "$tmp"/s[01].err || fail "5: a MASTER_ADDR error on one host"
echo "ok 5"

echo "== 6. bad input"
"$TRUN" --local-addr "" --no-python /bin/true >"$tmp/bad1" 2>&1
rc=$?
cat "$tmp/bad1"
[ $rc = 2 ] && grep -q -- "--local-addr '' must be an address, a host name (at most 255 bytes) or auto" "$tmp/bad1" ||
  fail "6: --local-addr '': exit $rc"
PET_LOCAL_ADDR= "$TRUN" --no-python /bin/true >"$tmp/bad2" 2>&1
rc=$?
cat "$tmp/bad2"
[ $rc = 2 ] && grep -q "(from PET_LOCAL_ADDR=)" "$tmp/bad2" || fail "6: PET_LOCAL_ADDR='': exit $rc"
echo "ok 6"
echo "PASS: MASTER_ADDR checked before the workers start; --local-addr auto needs no DNS"

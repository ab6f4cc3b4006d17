#!/usr/bin/env bash
# Static rendezvous across 3 "hosts": 3 network namespaces (10.250.0.1..3/24), each joined by a veth pair to
# a bridge that lives in a 4th namespace (nothing is added to the root namespace's interfaces). One trun agent
# per namespace, 2 workers each, --master-addr 10.250.0.1 (node 0's namespace), gloo all-reduce over the 6
# ranks through the agent's store. Started in shuffled order (node 2, 1, then 0). Same checks as test 50.
# Skips (77) only when network namespaces cannot be created here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch
need_cmd ip iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-51.XXXXXX")
pids=()
br=trunbr-$$
hosts=(trunh0-$$ trunh1-$$ trunh2-$$)
cleanup() {
  kill_marked
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for ns in "${hosts[@]}" "$br"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$br" 2>"$tmp/ns.err" || skip "cannot create a network namespace: $(tail -n1 "$tmp/ns.err")"
ip -n "$br" link set lo up || fail "lo up in $br"
ip -n "$br" link add br0 type bridge || skip "cannot create a bridge in a network namespace"
ip -n "$br" link set br0 up || fail "br0 up"
for i in 0 1 2; do
  h=${hosts[$i]}
  ip netns add "$h" || fail "netns add $h"
  ip -n "$h" link set lo up || fail "lo up in $h"
  # The veth pair is created inside the host namespace with its peer straight in the bridge namespace.
  ip -n "$h" link add eth0 type veth peer name vb$i netns "$br" || skip "cannot create veth pairs between namespaces"
  ip -n "$h" addr add 10.250.0.$((i + 1))/24 dev eth0 || fail "addr on $h"
  ip -n "$h" link set eth0 up || fail "eth0 up in $h"
  ip -n "$br" link set vb$i master br0 || fail "vb$i to br0"
  ip -n "$br" link set vb$i up || fail "vb$i up"
done
ip -n "$br" -br link
for i in 0 1 2; do ip -n "${hosts[$i]}" -br addr; done
# Connectivity first (plain TCP through the bridge), so a network problem is not blamed on trun.
port=29511
for i in 1 2; do
  wait_for "ip netns exec ${hosts[$i]} \"\$TRUN_HOST_PY\" -c 'import socket,sys; s=socket.socket(); s.settimeout(2); r=s.connect_ex((\"10.250.0.1\", 9)); sys.exit(0 if r in (0, 111) else 1)' 2>/dev/null" 30 ||
    fail "node $i's namespace cannot reach 10.250.0.1 through the bridge (no 'connection refused' reply)"
done
note "marker $MARKER; namespaces ${hosts[*]} via $br; master 10.250.0.1:$port"

start_agent() { # node
  # Gloo picks its address from the host name (same in every namespace, often 127.0.0.1): pin eth0.
  MN_OUT=$tmp/out GLOO_SOCKET_IFNAME=eth0 ip netns exec "${hosts[$1]}" "$TRUN" --nnodes 3 --node-rank "$1" --master-addr 10.250.0.1 \
    --master-port "$port" --nproc-per-node 2 --log-dir "$tmp/logs$1" "$TRUN_REPO/tests/helpers/mn_worker.py" \
    >"$tmp/agent$1.out" 2>"$tmp/agent$1.err" &
  pids[$1]=$!
}
mkdir -p "$tmp/out"
run_three_agents_shuffled 10.250.0.1
echo "PASS: 3 agents in 3 network namespaces over a bridge, ranks 0..5 placed 2i,2i+1 per node, all-reduce 15"

# Network namespace "hosts" for the multi-node tests (55 hostfile, 57 chaos). Source after mn_lib.sh.
#   netns_up NET N   creates N namespaces NS_HOSTS[i] with eth0 = NET.(i+1)/24 (NET like 10.251.0), all on a
#                    bridge that lives in its own namespace NS_BR (nothing added to the root namespace), then
#                    checks TCP reachability of NET.1 from the others. Skips (77) where namespaces are refused.
#   netns_down       deletes them (call from the EXIT trap).
NS_HOSTS=()
NS_BR=""
netns_up() { # NET N
  local net=$1 n=$2 i h
  need_cmd ip iproute2
  NS_BR=trunbr-$$
  local errf; errf=$(mktemp)
  ip netns add "$NS_BR" 2>"$errf" || { local e; e=$(tail -n1 "$errf"); rm -f "$errf"; NS_BR=""; skip "cannot create a network namespace: $e"; }
  rm -f "$errf"
  ip -n "$NS_BR" link set lo up || fail "lo up in $NS_BR"
  ip -n "$NS_BR" link add br0 type bridge || skip "cannot create a bridge in a network namespace"
  ip -n "$NS_BR" link set br0 up || fail "br0 up"
  for ((i = 0; i < n; i++)); do
    h=trunh$i-$$
    NS_HOSTS[$i]=$h
    ip netns add "$h" || fail "netns add $h"
    ip -n "$h" link set lo up || fail "lo up in $h"
    ip -n "$h" link add eth0 type veth peer name vb$i netns "$NS_BR" || skip "cannot create veth pairs between namespaces"
    ip -n "$h" addr add "$net.$((i + 1))/24" dev eth0 || fail "addr on $h"
    ip -n "$h" link set eth0 up || fail "eth0 up in $h"
    ip -n "$NS_BR" link set vb$i master br0 || fail "vb$i to br0"
    ip -n "$NS_BR" link set vb$i up || fail "vb$i up"
  done
  for ((i = 1; i < n; i++)); do
    wait_for "ip netns exec ${NS_HOSTS[$i]} \"\$TRUN_HOST_PY\" -c 'import socket,sys; s=socket.socket(); s.settimeout(2); r=s.connect_ex((\"$net.1\", 9)); sys.exit(0 if r in (0, 111) else 1)' 2>/dev/null" 30 ||
      fail "namespace ${NS_HOSTS[$i]} cannot reach $net.1 through the bridge"
  done
}
netns_down() {
  local ns
  for ns in "${NS_HOSTS[@]}" $NS_BR; do ip netns del "$ns" 2>/dev/null; done
  NS_HOSTS=()
  NS_BR=""
}

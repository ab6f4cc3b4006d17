#!/usr/bin/env bash
# Store access control.
#  1. Single node (--standalone): the agent's store listens only on the loopback addresses this host's name
#     resolves to (127.0.0.1, or 127.0.1.1 on a standard Debian host) (ss), and serves its workers.
#  1a. The same under the host-name layouts of a standard Debian / Ubuntu host, each in a private mount and
#     UTS namespace with its own /etc/hosts and host name: "127.0.1.1 <hostname>" (the installers' line)
#     gives a listener on 127.0.1.1 alone; a name that also maps to ::1 gives 127.0.1.1 and [::1] alone;
#     the job runs either way.
#  2. Three network namespaces on a bridge (10.251.0.1-3): a 2-node static job (nodes in h0 and h1,
#     --store-allow-peers, gloo all-reduce across both through node 0's store). While it runs, a raw
#     TCPStore probe (VALIDATE + PING) from h2, which is not in the job, is refused (the store closes the
#     connection, logs the refusal, counts it in trun_store_refused_total), while the same probe from h1
#     (a participant) and from h0 is answered. The job then ends with exit 0 on both nodes.
#  1b. c10d with --nnodes 1 and a loopback endpoint: the rendezvous store and the workers' store listen on
#     127.0.0.1 only.
#  3. The same namespaces, a 2-node c10d job with --store-allow-peers (--local-addr per node): the workers'
#     store of group rank 0 refuses h2's probe and answers the other participant; the rendezvous store stays
#     open to h2 (joins); exit 0 on both nodes.
# Skips (77) only when network namespaces cannot be created here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_torch
need_cmd ip iproute2
need_cmd ss iproute2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-81.XXXXXX")
pids=()
br=trunbr81-$$
hosts=(trunh81a-$$ trunh81b-$$ trunh81c-$$)
cleanup() {
  kill_marked
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for ns in "${hosts[@]}" "$br"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# ---- 1. single node: loopback only ----
mkdir -p "$tmp/one"
"$TRUN" --standalone --nproc-per-node 2 "$TRUN_REPO/tests/helpers/acl_worker.py" "$tmp/one" >"$tmp/one.out" 2>"$tmp/one.err" &
one=$!
pids+=("$one")
wait_for "[ -f '$tmp/one/ok.0' ] && [ -f '$tmp/one/ok.1' ]" 120 || { cat "$tmp/one.err"; fail "standalone job did not all-reduce"; }
port=$(sed -n 's/.*store [^:]*:\([0-9]*\)$/\1/p' "$tmp/one.out" | head -n1)
name=$(sed -n 's/.*store \([^:]*\):[0-9]*$/\1/p' "$tmp/one.out" | head -n1)
[ -n "$port" ] || fail "no store port in the workers' output: $(cat "$tmp/one.out")"
# Where MASTER_ADDR resolves on this host: only loopback addresses (127.0.0.1, or Debian's 127.0.1.1 for the
# host name) give listeners on exactly those; another address gives one listener on every address.
want=$("$TRUN_HOST_PY" - "$name" "$port" <<'PY'
import ipaddress, socket, sys
addrs = sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], None, type=socket.SOCK_STREAM)})
if all(ipaddress.ip_address(a).is_loopback for a in addrs):
    print(" ".join(("[%s]" % a if ":" in a else a) + ":" + sys.argv[2] for a in sorted(addrs, key=lambda a: (":" in a, a))))
else:
    print("*:" + sys.argv[2])
PY
)
listen=$(ss -Hltn "sport = :$port" | awk '{print $4}' | sort -t: -k1,1 | tr '\n' ' ' | sed 's/ $//')
note "standalone store (MASTER_ADDR $name) port $port listens on: $listen; want $want"
[ "$listen" = "$want" ] || fail "the single-node store (MASTER_ADDR $name) listens on '$listen', want '$want'"
touch "$tmp/one/go"
wait "$one" || fail "standalone job failed: $(cat "$tmp/one.err")"

# ---- 1a. Debian / Ubuntu host-name layouts: a name that resolves only to loopback addresses ----
# Runs a standalone job under host name trun-h81 with the given /etc/hosts; prints the store's listeners.
loopback_layout() { # CASE HOSTS-FILE-TEXT
  local d=$tmp/$1
  mkdir -p "$d/out"
  printf '%b' "$2" >"$d/hosts"
  # The job runs inside `unshare`; its pid is the unshare process (the namespace's processes die with it).
  unshare --mount --uts --propagation private -- /bin/sh -c \
    'hostname trun-h81 && mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$d/hosts" \
    "$TRUN" --standalone --nproc-per-node 2 "$TRUN_REPO/tests/helpers/acl_worker.py" "$d/out" >"$d/job.out" 2>"$d/job.err" &
  local job=$!
  pids+=("$job")
  wait_for "[ -f '$d/out/ok.0' ] && [ -f '$d/out/ok.1' ]" 120 ||
    { cat "$d/job.err"; fail "1a $1: the standalone job did not all-reduce under host name trun-h81"; }
  local p
  p=$(sed -n 's/.*store trun-h81:\([0-9]*\)$/\1/p' "$d/job.out" | head -n1)
  [ -n "$p" ] || fail "1a $1: the workers did not get MASTER_ADDR=trun-h81: $(cat "$d/job.out")"
  LISTEN=$(ss -Hltn "sport = :$p" | awk '{print $4}' | sort | tr '\n' ' ')
  note "1a $1: store port $p listens on: $LISTEN"
  touch "$d/out/go"
  wait "$job" || fail "1a $1: the standalone job failed: $(cat "$d/job.err")"
  LISTEN=${LISTEN//:$p/:PORT}
}
loopback_layout debian '127.0.0.1\tlocalhost\n127.0.1.1\ttrun-h81\n::1\tlocalhost ip6-localhost ip6-loopback\n'
[ "$LISTEN" = "127.0.1.1:PORT " ] || fail "1a: with '127.0.1.1 trun-h81' the store listens on '$LISTEN', want only 127.0.1.1:PORT"
loopback_layout dual '127.0.0.1\tlocalhost\n127.0.1.1\ttrun-h81\n::1\ttrun-h81 localhost\n'
[ "$LISTEN" = "127.0.1.1:PORT [::1]:PORT " ] ||
  fail "1a: with trun-h81 on 127.0.1.1 and ::1 the store listens on '$LISTEN', want only 127.0.1.1:PORT and [::1]:PORT"

# ---- 1b. c10d, one node (--nnodes 1), loopback endpoint: both stores on 127.0.0.1 only ----
mkdir -p "$tmp/c1"
rport=$(free_port)
"$TRUN" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$rport" --local-addr 127.0.0.1 --nproc-per-node 2 \
  "$TRUN_REPO/tests/helpers/acl_worker.py" "$tmp/c1" >"$tmp/c1.out" 2>"$tmp/c1.err" &
c1=$!
pids+=("$c1")
wait_for "[ -f '$tmp/c1/ok.0' ] && [ -f '$tmp/c1/ok.1' ]" 120 || { cat "$tmp/c1.err"; fail "c10d single-node job did not all-reduce"; }
wport=$(sed -n 's/.*store [^:]*:\([0-9]*\)$/\1/p' "$tmp/c1.out" | head -n1)
[ -n "$wport" ] || fail "c10d: no workers' store port in the workers' output: $(cat "$tmp/c1.out")"
for p in "$rport" "$wport"; do
  listen=$(ss -Hltn "sport = :$p" | awk '{print $4}')
  note "c10d single-node store port $p listens on: $listen"
  [ "$listen" = "127.0.0.1:$p" ] || fail "c10d --nnodes 1: the store on port $p listens on '$listen', want only 127.0.0.1:$p"
done
touch "$tmp/c1/go"
wait "$c1" || fail "c10d single-node job failed: $(cat "$tmp/c1.err")"

# ---- 1c. open files: the agent raises its soft limit to the hard one (its stores hold one descriptor per
# connection, and stop TRUN_STORE_FD_RESERVE short of it); its workers get the limit trun was started with ----
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -gt 1000 ]; then
  out=$( (ulimit -Sn 1000 && "$TRUN" --standalone --nproc-per-node 1 --no-python /bin/sh -c \
    'echo "worker $(ulimit -Sn)"; grep "^Max open files" /proc/$PPID/limits') 2>&1) || fail "1c: trun failed: $out"
  note "1c: $out"
  echo "$out" | grep -qx "worker 1000" || fail "1c: the worker did not get trun's starting soft limit 1000: $out"
  echo "$out" | grep -Eq "^Max open files +$hard +$hard " ||
    fail "1c: the agent's soft open-file limit is not the hard limit $hard: $out"
else
  note "1c: skipped (hard open-file limit $hard leaves nothing to raise to)"
fi

# ---- 2. three namespaces ----
ip netns add "$br" 2>"$tmp/ns.err" || skip "cannot create a network namespace: $(tail -n1 "$tmp/ns.err")"
ip -n "$br" link set lo up || fail "lo up in $br"
ip -n "$br" link add br0 type bridge || skip "cannot create a bridge in a network namespace"
ip -n "$br" link set br0 up || fail "br0 up"
for i in 0 1 2; do
  h=${hosts[$i]}
  ip netns add "$h" || fail "netns add $h"
  ip -n "$h" link set lo up || fail "lo up in $h"
  ip -n "$h" link add eth0 type veth peer name vc$i netns "$br" || skip "cannot create veth pairs between namespaces"
  ip -n "$h" addr add 10.251.0.$((i + 1))/24 dev eth0 || fail "addr on $h"
  ip -n "$h" link set eth0 up || fail "eth0 up in $h"
  ip -n "$br" link set vc$i master br0 || fail "vc$i to br0"
  ip -n "$br" link set vc$i up || fail "vc$i up"
done
port=29581
mkdir -p "$tmp/out"
for i in 0 1; do
  extra=()
  [ $i -eq 0 ] && extra=(--metrics-port 0)
  GLOO_SOCKET_IFNAME=eth0 ip netns exec "${hosts[$i]}" "$TRUN" --nnodes 2 --node-rank $i --master-addr 10.251.0.1 \
    --master-port $port --nproc-per-node 1 --store-allow-peers "${extra[@]}" \
    "$TRUN_REPO/tests/helpers/acl_worker.py" "$tmp/out" >"$tmp/agent$i.out" 2>"$tmp/agent$i.err" &
  pids[$i]=$!
done
wait_for "[ -f '$tmp/out/ok.0' ] && [ -f '$tmp/out/ok.1' ]" 120 ||
  { cat "$tmp/agent0.err" "$tmp/agent1.err"; fail "the 2-node job did not all-reduce with --store-allow-peers"; }
note "job runs; probing the store at 10.251.0.1:$port"
probe() { ip netns exec "${hosts[$1]}" "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/store_probe.py" 10.251.0.1 $port; }
out=$(probe 2); rc=$?
note "from h2 (not in the job): $out"
[ $rc -eq 3 ] || fail "a non-participant's probe was not refused (exit $rc: $out)"
out=$(probe 1) || fail "a participant's probe (h1) was not answered: $out"
out=$(probe 0) || fail "node 0's own host probe was not answered: $out"
grep -q 'refused a connection from 10.251.0.3' "$tmp/agent0.err" || fail "node 0 did not log the refusal: $(cat "$tmp/agent0.err")"
mport=$(sed -n 's/.*serving Prometheus metrics on port \([0-9]*\).*/\1/p' "$tmp/agent0.err" | head -n1)
m=$(ip netns exec "${hosts[0]}" curl -sf "http://127.0.0.1:$mport/metrics") || fail "no metrics from node 0"
grep -qx 'trun_store_refused_total 1' <<<"$m" || fail "trun_store_refused_total is not 1: $(grep refused <<<"$m")"
touch "$tmp/out/go"
for i in 0 1; do
  wait_pid_exit "${pids[$i]}" 120 || fail "agent $i did not finish"
  [ "$WAIT_RC" -eq 0 ] || { cat "$tmp/agent$i.err"; fail "agent $i exited $WAIT_RC"; }
done

# ---- 3. the same namespaces, c10d: --store-allow-peers on the workers' store of group rank 0 ----
rport=29582
mkdir -p "$tmp/out3"
for i in 0 1; do
  GLOO_SOCKET_IFNAME=eth0 ip netns exec "${hosts[$i]}" "$TRUN" --nnodes 2 --rdzv-backend c10d \
    --rdzv-endpoint 10.251.0.1:$rport --rdzv-id acl81 --local-addr 10.251.0.$((i + 1)) --nproc-per-node 1 \
    --store-allow-peers "$TRUN_REPO/tests/helpers/acl_worker.py" "$tmp/out3" >"$tmp/c10d$i.out" 2>"$tmp/c10d$i.err" &
  pids[$i]=$!
done
wait_for "[ -f '$tmp/out3/ok.0' ] && [ -f '$tmp/out3/ok.1' ]" 120 ||
  { cat "$tmp/c10d0.err" "$tmp/c10d1.err"; fail "the 2-node c10d job did not all-reduce with --store-allow-peers"; }
store=$(sed -n 's/.*store \(10\.251\.0\.[12]:[0-9]*\)$/\1/p' "$tmp/c10d0.out" "$tmp/c10d1.out" | sort -u)
[ "$(wc -l <<<"$store")" = 1 ] && [ -n "$store" ] || fail "c10d: want one workers' store address, got '$store'"
shost=${store%:*} sport=${store#*:}
other=$([ "$shost" = 10.251.0.1 ] && echo 1 || echo 0) # the participant that does not host it
note "c10d job runs; workers' store at $store; probing it"
probe() { ip netns exec "${hosts[$1]}" "$TRUN_HOST_PY" "$TRUN_REPO/tests/helpers/store_probe.py" "$2" "$3"; }
out=$(probe 2 "$shost" "$sport"); rc=$?
note "from h2 (not in the job): $out"
[ $rc -eq 3 ] || fail "c10d: a non-participant's probe of the workers' store was not refused (exit $rc: $out)"
out=$(probe "$other" "$shost" "$sport") || fail "c10d: the other participant's probe was not answered: $out"
out=$(probe 2 10.251.0.1 $rport) || fail "c10d: the rendezvous store must stay open to joins, h2 got: $out"
grep -q 'refused a connection from 10.251.0.3' "$tmp/c10d0.err" "$tmp/c10d1.err" ||
  fail "c10d: no agent logged the refusal: $(cat "$tmp/c10d0.err" "$tmp/c10d1.err")"
touch "$tmp/out3/go"
for i in 0 1; do
  wait_pid_exit "${pids[$i]}" 120 || fail "c10d agent $i did not finish"
  [ "$WAIT_RC" -eq 0 ] || { cat "$tmp/c10d$i.err"; fail "c10d agent $i exited $WAIT_RC"; }
done
echo "PASS: loopback-only single-node stores (static, c10d, Debian host-name layouts); --store-allow-peers refused 10.251.0.3 and served the job's hosts (static, c10d)"

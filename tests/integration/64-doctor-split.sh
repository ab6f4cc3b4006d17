#!/usr/bin/env bash
# The split-pod doctor (agent/nccl/doctor.c) across real rendezvous rounds. GPUs come from the fake NVML
# (build/libnvidia-ml-fake.so) with the h200x2 node fixture; workers are /bin/true-like (--no-python).
#  1. 2 agents in one network namespace, static backend over loopback, same boot id (the real one), one GPU
#     each (CUDA_VISIBLE_DEVICES 0 / 1): node rank 0 prints the split warning naming both group ranks, the
#     measured cost and the fix; node rank 1 prints no report; both exit 0 and their workers ran.
#  2. The same over the c10d backend (key base <round prefix>trun).
#  3. 2 agents in 2 network namespaces (a bridge between them, like test 51) with distinct fake boot ids
#     (TRUN_BOOT_ID): no report; the debug line says 2 agents were checked.
#  4. The same two namespaces, both agents seeing both GPUs: ERROR [gpu-clash] names the UUIDs and both ranks.
#  5. --on-split-pods=fail with 1.'s layout: both agents exit 1 and no worker starts.
#  6. One agent on the pod-p4d-4of8 fixture (4 of a p4d's 8 GPUs, 1 of its 4 EFA devices usable, the type from
#     DMI): the EFA warning (4 GPUs need 2); with all 4 EFA visible to the pod none.
#  7. The instance id from the fake IMDS (tests/fakes/imds_server.py through TRUN_IMDS_ENDPOINT; the doctor asks
#     it on nodes with usable EFA, so the pod-p4d-4of8 fixture, one GPU each): 2 agents in one namespace that
#     share instance id i-0123456789abcdef0 but have distinct fake boot ids: split warning "same instance id".
#  8. 2 agents in 2 namespaces, each with its own fake IMDS (distinct instance ids) and the SAME fake boot id:
#     no report (both instance ids known: they decide, not the boot id).
# Parts 3, 4 and 8 skip (the test exits 77 after 1, 2, 5, 6 and 7 passed) when network namespaces cannot be
# made here.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
fx=$TRUN_REPO/tests/fixtures/nodes/h200x2
shim=$TRUN_BUILD/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run make"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-64.XXXXXX")
pids=()
br=trunbr64-$$
hosts=(trunh64a-$$ trunh64b-$$)
imds_pids=()
cleanup() {
  for p in "${imds_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${imds_pids[@]}"; do wait "$p" 2>/dev/null; done
  kill_marked
  for ns in "${hosts[@]}" "$br"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
boot=$(cat /proc/sys/kernel/random/boot_id)
uuid0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"][0]["uuid"])' "$fx/nvml.json")
uuid1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"][1]["uuid"])' "$fx/nvml.json")
fake_env=(TRUN_SYSFS_ROOT="$fx/sys" TRUN_DEV_ROOT="$fx/dev" TRUN_DMI_ROOT="$fx/dmi" TRUN_NVML_LIBRARY="$shim"
  TRUN_FAKE_NVML_TOPO="$fx/nvml.json" AWS_EC2_METADATA_DISABLED=true)

# agent NAME NODE_RANK EXTRA_ENV(space-separated, may be "") [trun options...]: starts one agent in the
# background (stdout/stderr to $tmp/NAME.out/.err); its worker touches $tmp/ran.NAME.
agent() {
  local name=$1 rank=$2 extra=$3
  shift 3
  # shellcheck disable=SC2086
  env "${fake_env[@]}" $extra "$TRUN" --nnodes 2 --node-rank "$rank" --nproc-per-node 1 --max-restarts 0 \
    "$@" --no-python /usr/bin/touch "$tmp/ran.$name" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
}

doctor_event() { # FILE: its one "doctor" event, ts and host dropped, keys sorted
  python3 -c 'import json,sys
d=[e for e in map(json.loads, open(sys.argv[1])) if e["event"]=="doctor"]
assert len(d)==1, d
del d[0]["ts"], d[0]["host"]
print(json.dumps(d[0], sort_keys=True))' "$1"
}

wait_all() { # names...
  local ok=1
  wait_agents 120 60 touch "${pids[@]}" || ok=0
  for n in "$@"; do dump_agent "$n" "$tmp/$n.out" "$tmp/$n.err"; done
  [ $ok = 1 ] || fail "the agents did not all exit"
}

echo "== 1. one namespace, static, same boot id: split warning"
port=$(free_port)
pids=()
agent s1 1 "CUDA_VISIBLE_DEVICES=1" --master-addr 127.0.0.1 --master-port "$port"
agent s0 0 "CUDA_VISIBLE_DEVICES=0" --master-addr 127.0.0.1 --master-port "$port"
wait_all s0 s1
for i in 0 1; do [ "${AGENT_RC[${pids[$i]}]}" = 0 ] || fail "1: agent ${pids[$i]} exited ${AGENT_RC[${pids[$i]}]}"; done
[ -e "$tmp/ran.s0" ] && [ -e "$tmp/ran.s1" ] || fail "1: the workers did not run"
e=$tmp/s0.err
grep -q "^==== trun doctor: 2 agent(s) checked ====" "$e" || fail "1: node rank 0 printed no doctor report"
grep -qF "WARNING [split] 2 agents run on one physical host (same boot id $boot): group rank 0 (host " "$e" ||
  fail "1: no split warning with the boot id and group rank 0"
grep -qF "group rank 1 (host " "$e" || fail "1: the warning does not name group rank 1"
grep -qF "1 GPU, 1 worker" "$e" || fail "1: the warning does not give the GPUs per agent"
grep -qF "327.5 GB/s" "$e" && grep -qF "39:32" "$e" || fail "1: the warning lacks the measured cost"
grep -qF "Fix: one pod (one trun agent) per node with --nproc-per-node" "$e" || fail "1: the warning lacks the fix"
grep -qF "continuing (--on-split-pods=warn)" "$e" || fail "1: no 'continuing' line"
! grep -q "trun doctor" "$tmp/s1.err" || fail "1: node rank 1 printed a report too"
echo "ok 1"

echo "== 2. c10d backend: the same warning"
port=$(free_port)
pids=()
rm -f "$tmp"/ran.*
agent c1 1 "CUDA_VISIBLE_DEVICES=1" --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id doc64
agent c0 0 "CUDA_VISIBLE_DEVICES=0" --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id doc64
wait_all c0 c1
for i in 0 1; do [ "${AGENT_RC[${pids[$i]}]}" = 0 ] || fail "2: agent ${pids[$i]} exited ${AGENT_RC[${pids[$i]}]}"; done
n=$(grep -l "WARNING \[split\] 2 agents run on one physical host" "$tmp/c0.err" "$tmp/c1.err" | wc -l)
[ "$n" = 1 ] || fail "2: want the split warning from exactly one agent (the c10d group rank 0), got $n"
echo "ok 2"

echo "== 5. --on-split-pods=fail: both agents exit 1, no worker starts"
port=$(free_port)
pids=()
rm -f "$tmp"/ran.*
agent f1 1 "CUDA_VISIBLE_DEVICES=1" --master-addr 127.0.0.1 --master-port "$port" --on-split-pods fail \
  --events "$tmp/f1.ev"
agent f0 0 "CUDA_VISIBLE_DEVICES=0" --master-addr 127.0.0.1 --master-port "$port" --on-split-pods=fail \
  --events "$tmp/f0.ev"
wait_all f0 f1
for i in 0 1; do [ "${AGENT_RC[${pids[$i]}]}" = 1 ] || fail "5: agent ${pids[$i]} exited ${AGENT_RC[${pids[$i]}]}, want 1"; done
[ ! -e "$tmp/ran.f0" ] && [ ! -e "$tmp/ran.f1" ] || fail "5: a worker started"
grep -qF "WARNING [split]" "$tmp/f0.err" || fail "5: no report before exiting"
grep -qF "stopping before the workers start (--on-split-pods=fail)" "$tmp/f0.err" || fail "5: rank 0 does not say it stops"
grep -qF "group rank 0's doctor found a split-pod layout" "$tmp/f1.err" || fail "5: rank 1 does not say why it stops"
# The "doctor" events, exactly (ts and host aside): rank 0's analysis, rank 1's action.
want='{"action": "stop", "agents": 2, "agents_per_host": 2, "analyzed": true, "efa_warning": false, "event": "doctor", "gpu_clash": false, "group_rank": 0, "missing": 0, "on_split_pods": "fail", "round": 0, "split_pods": true}'
got=$(doctor_event "$tmp/f0.ev") || fail "5: no single doctor event: $(cat "$tmp/f0.ev")"
[ "$got" = "$want" ] || fail "5: node rank 0's doctor event: got $got, want $want"
want='{"action": "stop", "analyzed": false, "event": "doctor", "group_rank": 1, "on_split_pods": "fail", "round": 0}'
got=$(doctor_event "$tmp/f1.ev") || fail "5: no single doctor event: $(cat "$tmp/f1.ev")"
[ "$got" = "$want" ] || fail "5: node rank 1's doctor event: got $got, want $want"
"$TRUN" --on-split-pods maybe --no-python /bin/true >"$tmp/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "must be warn or fail" "$tmp/bad.out" || fail "5: --on-split-pods maybe: exit $rc: $(cat "$tmp/bad.out")"
echo "ok 5"

echo "== 6. EFA devices per GPU on a p4d pod"
p4d=$TRUN_REPO/tests/fixtures/nodes/pod-p4d-4of8
p4d_env=(TRUN_SYSFS_ROOT="$p4d/sys" TRUN_DEV_ROOT="$p4d/dev" TRUN_DMI_ROOT="$p4d/dmi" TRUN_NVML_LIBRARY="$shim"
  TRUN_FAKE_NVML_TOPO="$p4d/nvml.json" AWS_EC2_METADATA_DISABLED=true $(cat "$p4d/env"))
rc=0
env "${p4d_env[@]}" "$TRUN" --no-imds --events "$tmp/efa.ev" --nproc-per-node 1 --no-python /usr/bin/touch "$tmp/ran.efa" \
  >"$tmp/efa.out" 2>"$tmp/efa.err" || rc=$?
cat "$tmp/efa.err"
[ $rc = 0 ] && [ -e "$tmp/ran.efa" ] || fail "6: exit $rc or the worker did not run"
grep -qF "WARNING [efa] group rank 0 (host $(hostname), p4d.24xlarge): 1 usable EFA device(s) for 4 GPU(s); a p4d.24xlarge has 4 EFA for 8 GPUs, so 4 GPU(s) need 2." "$tmp/efa.err" ||
  fail "6: no EFA warning"
grep -qF "vpc.amazonaws.com/efa: 2" "$tmp/efa.err" || fail "6: the EFA warning does not say what to request"
want='{"action": "continue", "agents": 1, "agents_per_host": 1, "analyzed": true, "efa_warning": true, "event": "doctor", "gpu_clash": false, "group_rank": 0, "missing": 0, "on_split_pods": "warn", "round": 0, "split_pods": false}'
got=$(doctor_event "$tmp/efa.ev") || fail "6: no single doctor event: $(cat "$tmp/efa.ev")"
[ "$got" = "$want" ] || fail "6: the doctor event: got $got, want $want"
# The same pod with every EFA device's uverbs node: no warning.
mkdir -p "$tmp/dev4/infiniband"
for i in 0 1 2 3; do touch "$tmp/dev4/infiniband/uverbs$i"; done
rc=0
env "${p4d_env[@]}" TRUN_DEV_ROOT="$tmp/dev4" "$TRUN" --no-imds --nproc-per-node 1 --no-python /usr/bin/touch \
  "$tmp/ran.efa4" >"$tmp/efa4.out" 2>"$tmp/efa4.err" || rc=$?
[ $rc = 0 ] || fail "6: 4 EFA: exit $rc"
! grep -q "trun doctor" "$tmp/efa4.err" || fail "6: a report with 4 EFA for 4 GPUs: $(cat "$tmp/efa4.err")"
echo "ok 6"

# start_imds NAME INSTANCE_ID [ip netns exec NS]: a fake IMDS (mode normal, this instance id) in the current
# or the given network namespace; sets imds_ep to its http://127.0.0.1:PORT (as seen from that namespace).
start_imds() {
  local name=$1 id=$2
  shift 2
  rm -f "$tmp/imds.$name.port"
  "$@" "$TRUN_HOST_PY" "$TRUN_REPO/tests/fakes/imds_server.py" --mode normal --instance-id "$id" \
    --port-file "$tmp/imds.$name.port" 2>"$tmp/imds.$name.log" &
  imds_pids+=($!)
  wait_for "[ -s '$tmp/imds.$name.port' ]" 30 || fail "the fake IMDS $name did not start: $(cat "$tmp/imds.$name.log")"
  imds_ep=http://127.0.0.1:$(cut -d' ' -f1 "$tmp/imds.$name.port")
}
p4d=$TRUN_REPO/tests/fixtures/nodes/pod-p4d-4of8
# The p4d pod fixture (1 usable EFA: the doctor asks the IMDS) with the network allowed; CUDA_VISIBLE_DEVICES
# per agent picks one of its GPUs (4..7), so 1 GPU with 1 EFA: no EFA warning.
imds_env="TRUN_SYSFS_ROOT=$p4d/sys TRUN_DEV_ROOT=$p4d/dev TRUN_DMI_ROOT=$p4d/dmi TRUN_FAKE_NVML_TOPO=$p4d/nvml.json AWS_EC2_METADATA_DISABLED=false"

echo "== 7. one namespace, one instance id (fake IMDS), distinct boot ids: split by instance id"
start_imds one i-0aaaaaaaaaaaaaaa1
port=$(free_port)
pids=()
rm -f "$tmp"/ran.*
agent i1 1 "$imds_env TRUN_IMDS_ENDPOINT=$imds_ep TRUN_BOOT_ID=fake-boot-i1 CUDA_VISIBLE_DEVICES=5" \
  --master-addr 127.0.0.1 --master-port "$port"
agent i0 0 "$imds_env TRUN_IMDS_ENDPOINT=$imds_ep TRUN_BOOT_ID=fake-boot-i0 CUDA_VISIBLE_DEVICES=4" \
  --master-addr 127.0.0.1 --master-port "$port"
wait_all i0 i1
for i in 0 1; do [ "${AGENT_RC[${pids[$i]}]}" = 0 ] || fail "7: agent ${pids[$i]} exited ${AGENT_RC[${pids[$i]}]}"; done
[ -e "$tmp/ran.i0" ] && [ -e "$tmp/ran.i1" ] || fail "7: the workers did not run"
grep -qF "WARNING [split] 2 agents run on one physical host (same instance id i-0aaaaaaaaaaaaaaa1): group rank 0 (host " "$tmp/i0.err" ||
  fail "7: no split warning naming the shared instance id"
grep -qF "group rank 1 (host " "$tmp/i0.err" || fail "7: the warning does not name group rank 1"
! grep -qF "[efa]" "$tmp/i0.err" || fail "7: an EFA warning for 1 GPU with 1 EFA"
! grep -q "trun doctor" "$tmp/i1.err" || fail "7: node rank 1 printed a report too"
kill "${imds_pids[@]}" 2>/dev/null
echo "ok 7"

# ---- separate network namespaces ----
need_cmd ip iproute2
ip netns add "$br" 2>"$tmp/ns.err" || skip "parts 1, 2, 5, 6, 7 passed; cannot create a network namespace: $(tail -n1 "$tmp/ns.err")"
ip -n "$br" link set lo up && ip -n "$br" link add br0 type bridge && ip -n "$br" link set br0 up ||
  skip "parts 1, 2, 5, 6, 7 passed; cannot create a bridge in a network namespace"
for i in 0 1; do
  h=${hosts[$i]}
  ip netns add "$h" || fail "netns add $h"
  ip -n "$h" link set lo up
  ip -n "$h" link add eth0 type veth peer name vb$i netns "$br" || skip "parts 1, 2, 5, 6, 7 passed; cannot create veth pairs"
  ip -n "$h" addr add 10.251.0.$((i + 1))/24 dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$br" link set vb$i master br0
  ip -n "$br" link set vb$i up
done
wait_for "ip netns exec ${hosts[1]} \"\$TRUN_HOST_PY\" -c 'import socket,sys; s=socket.socket(); s.settimeout(2); r=s.connect_ex((\"10.251.0.1\", 9)); sys.exit(0 if r in (0, 111) else 1)' 2>/dev/null" 30 ||
  fail "namespace ${hosts[1]} cannot reach 10.251.0.1"

ns_agent() { # name node-rank extra-env [trun options...]
  local name=$1 rank=$2 extra=$3
  shift 3
  # shellcheck disable=SC2086
  ip netns exec "${hosts[$rank]}" env "${fake_env[@]}" TRUN_LOG_LEVEL=debug $extra "$TRUN" --nnodes 2 \
    --node-rank "$rank" --nproc-per-node 1 --master-addr 10.251.0.1 --master-port 29564 --local-addr "10.251.0.$((rank + 1))" \
    "$@" --no-python /usr/bin/touch "$tmp/ran.$name" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
}

echo "== 3. two namespaces, distinct boot ids: no report"
pids=()
ns_agent n1 1 "TRUN_BOOT_ID=fake-boot-b CUDA_VISIBLE_DEVICES=1"
ns_agent n0 0 "TRUN_BOOT_ID=fake-boot-a CUDA_VISIBLE_DEVICES=0"
wait_all n0 n1
for i in 0 1; do [ "${AGENT_RC[${pids[$i]}]}" = 0 ] || fail "3: agent ${pids[$i]} exited ${AGENT_RC[${pids[$i]}]}"; done
! grep -q "trun doctor" "$tmp/n0.err" "$tmp/n1.err" || fail "3: a doctor report for two distinct hosts"
grep -q "doctor: 2 agent(s), no split pods, no GPU clash" "$tmp/n0.err" || fail "3: node rank 0 did not check 2 agents"
echo "ok 3"

echo "== 4. two namespaces, both agents see both GPUs: GPU clash"
pids=()
ns_agent g1 1 "TRUN_BOOT_ID=fake-boot-b" --nproc-per-node 2
ns_agent g0 0 "TRUN_BOOT_ID=fake-boot-a" --nproc-per-node 2
wait_all g0 g1
e=$tmp/g0.err
for u in "$uuid0" "$uuid1"; do
  grep -qF "ERROR [gpu-clash] GPU $u is seen by 2 agents: group rank 0 (host " "$e" || fail "4: no clash error for $u"
done
grep -qF "group rank 1 (host " "$e" || fail "4: the clash does not name group rank 1"
! grep -qF "[split]" "$e" || fail "4: distinct boot ids reported as a split"
echo "ok 4"
echo "== 8. two namespaces, each its own fake IMDS (distinct instance ids), the same boot id: no report"
start_imds ns0 i-0bbbbbbbbbbbbbbb0 ip netns exec "${hosts[0]}"
ep0=$imds_ep
start_imds ns1 i-0bbbbbbbbbbbbbbb1 ip netns exec "${hosts[1]}"
ep1=$imds_ep
pids=()
rm -f "$tmp"/ran.*
ns_agent m1 1 "$imds_env TRUN_IMDS_ENDPOINT=$ep1 TRUN_BOOT_ID=fake-boot-same CUDA_VISIBLE_DEVICES=5"
ns_agent m0 0 "$imds_env TRUN_IMDS_ENDPOINT=$ep0 TRUN_BOOT_ID=fake-boot-same CUDA_VISIBLE_DEVICES=4"
wait_all m0 m1
for i in 0 1; do [ "${AGENT_RC[${pids[$i]}]}" = 0 ] || fail "8: agent ${pids[$i]} exited ${AGENT_RC[${pids[$i]}]}"; done
[ -e "$tmp/ran.m0" ] && [ -e "$tmp/ran.m1" ] || fail "8: the workers did not run"
! grep -q "trun doctor" "$tmp/m0.err" "$tmp/m1.err" || fail "8: a doctor report for two instances"
grep -q "doctor: 2 agent(s), no split pods, no GPU clash" "$tmp/m0.err" || fail "8: node rank 0 did not check 2 agents"
for n in ns0 ns1; do
  [ "$(grep -c 'GET /latest/meta-data/instance-id' "$tmp/imds.$n.log")" -ge 1 ] ||
    fail "8: the agent in namespace $n did not ask its IMDS for the instance id: $(cat "$tmp/imds.$n.log")"
done
echo "ok 8"
echo "PASS: doctor split / clash / fail across real rendezvous rounds"

#!/usr/bin/env bash
# runner: lock=dist
# Two pods on one bridge network: two containers of the image `make image` builds, podman + runc as root, on a
# CNI bridge of their own with no DNS (tests/helpers/pod_lib.sh): each resolves its own host name (/etc/hosts)
# but not the other's, as bare Kubernetes pods without a headless Service. trun is PID 1 of each.
#  1. --rdzv-backend c10d, the endpoint the first container's address, --local-addr auto: each agent takes
#     the local address of its rendezvous connection as its identity (said on stderr), node rank 0's becomes
#     the workers' MASTER_ADDR, and examples/train_ddp.py (1 gloo worker per container, torch 1.13) trains in
#     a world of 2; both containers exit 0 and the two replicas end in sync. The run's time is printed.
#  2. The same without --local-addr: node rank 0 publishes its host name, which the other container cannot
#     resolve. Instead of torch's 30-minute retry, that agent names MASTER_ADDR, the cause and the fix
#     (--local-addr auto, a headless Service) and exits 1, and the other stops too (exit 1, the lost node's
#     cause in its report); both within a safety limit, the time printed.
#  3. The split-pod doctor across containers: the fake NVML (h200x2 fixture) in both, one GPU each
#     (CUDA_VISIBLE_DEVICES 0 / 1), the static backend: the containers share the kernel's boot id, so node
#     rank 0 warns that 2 agents run on one physical host; one container holding both GPUs: no report.
# Exit: 0 pass, anything else fail.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
. "$TRUN_REPO/tests/helpers/pod_lib.sh"
pod_setup 78
pod_build
ip0=$pod_prefix.10 ip1=$pod_prefix.11

# node NAME I [podman run options] -- [trun options]: container NAME (host name NAME) at address .1I, detached.
node() {
  local name=$1 i=$2 popts=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do popts+=("$1"); shift; done
  shift
  podman run -d --name "$name" --hostname "$name" --network "$pod_net" --ip "$pod_prefix.1$i" --shm-size 1g \
    -v "$pod_out:/out" "${popts[@]}" "$pod_image" "$@" >/dev/null || fail "podman run $name failed"
}
wait_nodes() { # limit names...
  local limit=$1 n
  shift
  for n in "$@"; do pod_wait "$n" "$limit" || { for n in "$@"; do pod_logs "$n"; done; fail "$n still runs after $limit s"; }; done
  for n in "$@"; do pod_logs "$n"; done
}

echo "== 1. c10d, --local-addr auto: train_ddp.py in a world of 2"
t0=$(now)
for i in 0 1; do
  node a$i $i -- --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ip0:29400" --rdzv-id pods78 \
    --local-addr auto /opt/trun/examples/train_ddp.py --steps 5
done
wait_nodes 300 a0 a1
echo "two containers, c10d, train_ddp.py 5 steps: $(elapsed "$t0") s from the first podman run to both exits"
for i in 0 1; do
  rc=$(pod_exit a$i)
  [ "$rc" = 0 ] || fail "1: container a$i exited $rc"
  podman logs a$i 2>&1 | grep -q "trun: info: --local-addr auto: this node is $pod_prefix.1$i (" ||
    fail "1: a$i does not say it is $pod_prefix.1$i"
done
podman logs a0 >"$tmp/a0.log" 2>&1
podman logs a1 >"$tmp/a1.log" 2>&1
grep -h "DDP: 2 ranks, gloo" "$tmp/a0.log" "$tmp/a1.log" | grep -q . || fail "1: no world of 2"
[ "$(cat "$tmp/a0.log" "$tmp/a1.log" | grep "params checksum" | awk '{print $NF}' | sort -u | wc -l)" = 1 ] &&
  [ "$(cat "$tmp/a0.log" "$tmp/a1.log" | grep -c "params checksum")" = 2 ] || fail "1: want 2 equal checksums"
echo "ok 1"

echo "== 2. c10d without --local-addr: the MASTER_ADDR check stops both at once"
t0=$(now)
for i in 0 1; do
  node b$i $i -- --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ip0:29400" --rdzv-id pods78b \
    /opt/trun/examples/train_ddp.py --steps 5
done
wait_nodes 120 b0 b1
echo "without --local-addr: both containers stopped $(elapsed "$t0") s after the first podman run"
for i in 0 1; do
  rc=$(pod_exit b$i)
  [ "$rc" = 1 ] || fail "2: container b$i exited $rc, want 1"
  podman logs b$i >"$tmp/b$i.log" 2>&1
done
bad=$(grep -l "trun: error: the workers' MASTER_ADDR 'b[01]' does not resolve on this node" "$tmp"/b[01].log)
[ "$(wc -l <<<"$bad")" = 1 ] && [ -n "$bad" ] || fail "2: want the error from exactly one container"
other=$tmp/b0.log
[ "$bad" = "$tmp/b0.log" ] && other=$tmp/b1.log
grep -q "Run every node with --local-addr auto" "$bad" && grep -q "headless Service" "$bad" || fail "2: the error lacks the fix"
grep -q "is lost: it left the job: its workers could not use MASTER_ADDR" "$other" ||
  fail "2: the other container does not name the cause"
echo "ok 2"

echo "== 3. split pods: two containers on one host's GPUs"
fx=$TRUN_REPO/tests/fixtures/nodes/h200x2
shim=$TRUN_BUILD/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run make"
jansson=$(readlink -f /usr/lib/x86_64-linux-gnu/libjansson.so.4)
fake=(-v "$fx:$fx:ro" -v "$shim:$shim:ro" -v "$jansson:/usr/lib/x86_64-linux-gnu/libjansson.so.4:ro"
  -e "TRUN_SYSFS_ROOT=$fx/sys" -e "TRUN_DEV_ROOT=$fx/dev" -e "TRUN_DMI_ROOT=$fx/dmi" -e "TRUN_NVML_LIBRARY=$shim"
  -e "TRUN_FAKE_NVML_TOPO=$fx/nvml.json" -e AWS_EC2_METADATA_DISABLED=true)
for i in 0 1; do
  node s$i $i "${fake[@]}" -e "CUDA_VISIBLE_DEVICES=$i" -- --nnodes 2 --node-rank $i --master-addr "$ip0" \
    --master-port 29500 --local-addr auto --nproc-per-node 1 --no-python /bin/true
done
wait_nodes 120 s0 s1
for i in 0 1; do [ "$(pod_exit s$i)" = 0 ] || fail "3: container s$i exited $(pod_exit s$i)"; done
boot=$(cat /proc/sys/kernel/random/boot_id)
podman logs s0 2>&1 | grep -qF "WARNING [split] 2 agents run on one physical host (same boot id $boot): group rank 0 (host s0, 1 GPU, 1 worker)" ||
  fail "3: node rank 0 does not warn of 2 agents on one host"
! podman logs s1 2>&1 | grep -q "trun doctor" || fail "3: node rank 1 printed a report too"
node w 0 "${fake[@]}" -- --standalone --nproc-per-node 2 --no-python /bin/true
wait_nodes 120 w
[ "$(pod_exit w)" = 0 ] || fail "3: the one-container job exited $(pod_exit w)"
! podman logs w 2>&1 | grep -q "trun doctor" || fail "3: a doctor report for one container holding both GPUs"
echo "ok 3"
echo "PASS: two containers train over a bridge without DNS (--local-addr auto); without it the job stops at once"

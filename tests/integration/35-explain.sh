#!/usr/bin/env bash
# trun --explain and the environment decisions reaching real workers (agent/nccl/nccl_env.c, spec
# gpu-efa-nccl.md §2-§4), on the p4d.24xlarge node fixture (tests/fixtures/nodes/) with the fake NVML
# (build/libnvidia-ml-fake.so) and the fake IMDS (tests/fakes/imds_server.py, mode normal: p4d.24xlarge):
#  1. --explain with IMDS: exit 0, nothing started, the instance type from imds, every decision with value,
#     source and reason; a user-set variable shown as the user's with the user's value.
#  2. --explain --no-imds: the type from DMI and no connection to the fake (its request counter stays 0).
#  3. a real 2-worker launch (torch 1.13, gloo all-reduce, tests/helpers/envaffinity.py) with
#     --nproc-per-node gpu (CUDA_VISIBLE_DEVICES=0,4: one GPU on each NUMA node) and --numa-binding node on a
#     copy of the fixture whose node0/node1 cpulists are swapped to CPUs 1 / 0: every variable --explain
#     printed as set by trun reached both workers with that value, the user-set ones are unchanged, the
#     plugin's are not set, and each worker runs on exactly its GPU's NUMA CPUs.
#  4. --nproc-per-node gpu discovers the node once (NVML initialised as often as with a number).
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
shim=$build/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run 'make' first"
fx=$repo/tests/fixtures/nodes/p4d.24xlarge

# The fake IMDS (killed on exit with the other process groups).
pf=$tmp/imds.ports
setsid "$host_py" "$repo/tests/fakes/imds_server.py" --mode normal --port-file "$pf" 2>"$tmp/imds.log" &
_bg_pgids+=("$!")
for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.05; done
[ -s "$pf" ] || fail "fake IMDS wrote no port file: $(cat "$tmp/imds.log")"
read -r imds_port ctl_port <"$pf"
imds_requests() {
  "$host_py" -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen("http://127.0.0.1:%s/count" % sys.argv[1]))["requests"])' "$ctl_port"
}

# node_env ROOT: sets envv to `env -i` with a clean environment and the test hooks pointing at the node
# fixture at ROOT; callers append their own NAME=VALUE words and the command.
node_env() {
  local root=$1
  envv=(env -i PATH="$PATH" HOME="$tmp" TMPDIR="$TMPDIR" PYTHON_EXEC="$host_py"
    TRUN_SYSFS_ROOT="$root/sys" TRUN_DEV_ROOT="$root/dev" TRUN_DMI_ROOT="$root/dmi"
    TRUN_NVML_LIBRARY="$shim" TRUN_FAKE_NVML_TOPO="$root/nvml.json"
    TRUN_IMDS_ENDPOINT="http://127.0.0.1:$imds_port")
}
node() {
  node_env "$1"
  shift
  "${envv[@]}" "$@"
}

echo "== 1. --explain with IMDS"
rc=0
node "$fx" NCCL_P2P_LEVEL=PIX NCCL_DEBUG=INFO "$trun" --explain --nproc-per-node gpu \
  "$repo/tests/helpers/touch.py" "$tmp/started" >"$tmp/explain.out" 2>"$tmp/explain.err" || rc=$?
cat "$tmp/explain.out"
[ $rc -eq 0 ] || fail "--explain: exit $rc: $(cat "$tmp/explain.err")"
[ ! -s "$tmp/explain.err" ] || fail "--explain: stderr: $(cat "$tmp/explain.err")"
[ ! -e "$tmp/started" ] || fail "--explain started the script"
grep -q "^  instance type: p4d.24xlarge (from imds)  id: i-0123456789abcdef0" "$tmp/explain.out" ||
  fail "--explain: no instance type from IMDS"
grep -q "^  GPUs: 8 visible (nvml)" "$tmp/explain.out" || fail "--explain: GPU summary"
grep -q "^  EFA devices: 4, usable in this container: 4" "$tmp/explain.out" || fail "--explain: EFA summary"
grep -q "^workers on this node: 8 " "$tmp/explain.out" || fail "--explain: nproc gpu"
# explain_row NAME VALUE-LINE SOURCE: the variable's line and the source line after it.
explain_row() {
  grep -A1 -x -- "  $2" "$tmp/explain.out" | grep -q -- "^      source: $3; [^ ,:].\{20\}" ||
    fail "--explain: no row '$2' with source $3 and a reason in words"
}
# explanations in words: no references to trun's design notes (issue 38: "§2, §3", "(O1, O7)")
! grep -nE '§|[ (][OLNA][0-9]+[,):]|\(\)|::|; [,:]' "$tmp/explain.out" ||
  fail "--explain prints references instead of words (above)"
explain_row FI_PROVIDER "FI_PROVIDER=efa" trun
explain_row FI_EFA_USE_DEVICE_RDMA "FI_EFA_USE_DEVICE_RDMA=1" trun
explain_row FI_EFA_FORK_SAFE "FI_EFA_FORK_SAFE (left to plugin, not set)" plugin
explain_row NCCL_TOPO_FILE "NCCL_TOPO_FILE (left to plugin, not set)" plugin
explain_row NCCL_P2P_LEVEL "NCCL_P2P_LEVEL=PIX" user
explain_row NCCL_SOCKET_IFNAME "NCCL_SOCKET_IFNAME==eth0,eth1" trun
explain_row NCCL_DEBUG "NCCL_DEBUG=INFO" user
[ "$(imds_requests)" -gt 0 ] || fail "--explain made no IMDS request"

echo "== 2. --explain --no-imds"
before=$(imds_requests)
node "$fx" "$trun" --explain --no-imds >"$tmp/explain2.out" 2>&1 || fail "--explain --no-imds: exit $?"
grep -q "^  instance type: p4d.24xlarge (from dmi)" "$tmp/explain2.out" ||
  fail "--explain --no-imds: $(head -3 "$tmp/explain2.out")"
[ "$(imds_requests)" -eq "$before" ] || fail "--no-imds still asked the IMDS"

echo "== 3. a 2-worker launch with the decided environment and --numa-binding node"
ncpu=$("$host_py" -c 'import os; print(len(os.sched_getaffinity(0)))')
has01=$("$host_py" -c 'import os; a = os.sched_getaffinity(0); print(int(0 in a and 1 in a))')
[ "$has01" = 1 ] || skip "this process may not run on both CPU 0 and CPU 1 (affinity of $ncpu CPUs)"
mod=$tmp/node
cp -a "$fx" "$mod"
echo 1 >"$mod/sys/devices/system/node/node0/cpulist"
echo 0 >"$mod/sys/devices/system/node/node1/cpulist"
node "$mod" CUDA_VISIBLE_DEVICES=0,4 "$trun" --explain --nproc-per-node gpu --numa-binding node \
  >"$tmp/explain3.out" 2>&1 || fail "--explain for the launch: exit $?"
cat "$tmp/explain3.out" | sed -n '/^--numa-binding/,$p'
mkdir -p "$tmp/out"
rc=0
node_env "$mod"
(cd /tmp && run_pg "${envv[@]}" CUDA_VISIBLE_DEVICES=0,4 NCCL_SOCKET_IFNAME=user0 FI_EFA_USE_DEVICE_RDMA=0 \
  TRUN_CPU_AFFINITY=0-1 "$trun" --standalone --nproc-per-node gpu --numa-binding node \
  "$repo/tests/helpers/envaffinity.py" "$tmp/out") >"$tmp/run.log" 2>&1 || rc=$?
sed 's/^/    /' "$tmp/run.log"
[ $rc -eq 0 ] || fail "launch: exit $rc"
"$host_py" - "$tmp/explain3.out" "$tmp/out" <<'PY' || fail "the workers' environment or affinity is wrong"
import json, re, sys
text = open(sys.argv[1]).read()
# "  NAME=VALUE\n      source: trun; ..." rows of --explain
trun_set = dict(re.findall(r"^  ([A-Z0-9_]+)=(.*)\n      source: trun;", text, re.M))
left = re.findall(r"^  ([A-Z0-9_]+) \((?:left to plugin, )?not set\)", text, re.M)
pins = dict(re.findall(r"^  local rank (\d+): (\S+)$", text, re.M))
print("explain: set by trun", trun_set, "not set", left, "pins", pins)
assert trun_set.get("FI_PROVIDER") == "efa" and trun_set.get("NCCL_P2P_LEVEL") == "NVL", trun_set
assert "FI_EFA_FORK_SAFE" in left and "NCCL_TOPO_FILE" in left, left
assert pins == {"0": "1", "1": "0"}, pins
for lr in (0, 1):
    w = json.load(open("%s/worker.%d.json" % (sys.argv[2], lr)))
    env = w["env"]
    assert w["torch"].startswith("1.13"), w["torch"]
    assert w["sum"] == 1.0 and w["world"] == 2, w
    assert env["LOCAL_WORLD_SIZE"] == "2", env["LOCAL_WORLD_SIZE"]
    for k, v in trun_set.items():
        if k in ("NCCL_SOCKET_IFNAME", "FI_EFA_USE_DEVICE_RDMA"):
            continue  # set by the user in this run
        assert env.get(k) == v, (lr, k, env.get(k), v)
    assert env["NCCL_SOCKET_IFNAME"] == "user0", env["NCCL_SOCKET_IFNAME"]
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "0", env["FI_EFA_USE_DEVICE_RDMA"]
    for k in left:
        assert k not in env, (lr, k, env[k])
    assert "TRUN_NUMA_PLAN" not in env
    want = int(pins[str(lr)])
    assert env["TRUN_CPU_AFFINITY"] == str(want), env["TRUN_CPU_AFFINITY"]
    assert w["affinity"] == [want], (lr, w["affinity"])
    print("local rank %d: torch %s, affinity %s, %d decided variables checked" % (lr, w["torch"], w["affinity"], len(trun_set)))
PY

echo "== 4. --nproc-per-node gpu asks NVML no more often than a number does (one discovery, not two)"
for spec in 8 gpu; do
  : >"$tmp/inits.$spec"
  rc=0
  node "$fx" TRUN_FAKE_NVML_INIT_LOG="$tmp/inits.$spec" "$trun" --no-imds --standalone --nproc-per-node "$spec" \
    --no-python /bin/true >"$tmp/n.$spec.out" 2>"$tmp/n.$spec.err" || rc=$?
  [ $rc -eq 0 ] || fail "--nproc-per-node $spec: exit $rc: $(cat "$tmp/n.$spec.err")"
done
[ "$(wc -l <"$tmp/inits.gpu")" -eq "$(wc -l <"$tmp/inits.8")" ] ||
  fail "--nproc-per-node gpu initialised NVML $(wc -l <"$tmp/inits.gpu") times, a number $(wc -l <"$tmp/inits.8")"
echo PASS

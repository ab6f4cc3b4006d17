# Shared by the node health tests in network namespaces (tests/integration/71, 72). Source it after mn_lib.sh.
# Each node gets the fake NVML (build/libnvidia-ml-fake.so) with one GPU of its own UUID, an empty sysfs,
# /dev and DMI (no EFA, no instance type), its own boot id (no split-pod warnings), and a file the fake
# NVML reads Xids from (TRUN_FAKE_NVML_XID).
shim=$TRUN_BUILD/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run make"

# health_node DIR I FAULT_JSON: writes DIR/node$I/ (nvml.json with FAULT_JSON merged into its GPU, sys/, dev/,
# dmi/, xid).
health_node() {
  local d=$1/node$2
  mkdir -p "$d/sys" "$d/dev" "$d/dmi"
  : >"$d/xid"
  "$TRUN_HOST_PY" - "$d/nvml.json" "$2" "$3" <<'PY'
import json, sys
gpu = {"uuid": "GPU-7a1e0000-0000-4000-8000-00000000000%s" % sys.argv[2], "name": "NVIDIA H100 80GB HBM3",
       "pci": "", "memory": 85520809984}
gpu.update(json.loads(sys.argv[3]))
json.dump({"gpus": [gpu]}, open(sys.argv[1], "w"))
PY
}

# health_env DIR I: the environment (VAR=value words) of node I's agent.
health_env() {
  local d=$1/node$2
  echo "TRUN_NVML_LIBRARY=$shim TRUN_FAKE_NVML_TOPO=$d/nvml.json TRUN_FAKE_NVML_XID=$d/xid" \
    "TRUN_SYSFS_ROOT=$d/sys TRUN_DEV_ROOT=$d/dev TRUN_DMI_ROOT=$d/dmi TRUN_SHM_PATH=$1" \
    "TRUN_BOOT_ID=boot-node$2 AWS_EC2_METADATA_DISABLED=true"
}

# rank0_host OUT W: the EL_HOST (h0, h1, ...) whose worker was rank 0 in a world of W (world files of
# tests/helpers/elastic_worker.py in OUT).
rank0_host() {
  local f
  for f in "$1"/world.*; do
    [ -e "$f" ] || continue
    if awk -v w="$2" '$1 == w && $2 == 0 {found=1} END {exit !found}' "$f"; then
      basename "$f" | cut -d. -f2
      return 0
    fi
  done
  return 1
}

# listening NS PORT: something listens on PORT in network namespace NS.
listening() { ip netns exec "$1" ss -ltn 2>/dev/null | grep -q ":$2 "; }

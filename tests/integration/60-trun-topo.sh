#!/usr/bin/env bash
# build/trun-topo against the node fixtures (tests/fixtures/nodes/<name>/, written by gen.py there): for each
# fixture, trun-topo --json --no-imds with TRUN_SYSFS_ROOT / TRUN_DEV_ROOT / TRUN_DMI_ROOT pointing into it,
# the fake NVML (build/libnvidia-ml-fake.so reading its nvml.json), or where it has a cudart.json instead no
# NVML library and the fake CUDA runtime (build/libcuda-nccl-fake.so reading it; no file = neither), and
# the variables of its env file (and TRUN_CGROUP_ROOT=<fixture>/cgroup where it has one), in an otherwise
# empty environment, must print exactly its expected.json (GPUs, EFA, links, P2P, nproc_auto, env
# decisions), exit 0 and say nothing on stderr; the table form must run too (with its P2P matrix where
# there are GPUs; pcie-cudart's exactly). Then: a CUDA_VISIBLE_DEVICES entry naming no GPU (stderr names
# it, exit 0, the GPUs before it are kept), --help (exit 0), a bad option (exit 2, one stderr line).
# Exit: 0 pass, 77 skip, anything else fail.
set -euo pipefail
repo=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${TRUN_BUILD:-$repo/build}
topo=$build/trun-topo
shim=$build/libnvidia-ml-fake.so
cudart=$build/libcuda-nccl-fake.so
fx=$repo/tests/fixtures/nodes
tmp=$(mktemp -d /tmp/trun-topo-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$topo" ] || fail "$topo is missing; run 'make' first"
[ -f "$shim" ] || fail "$shim is missing; run 'make' first"
[ -f "$cudart" ] || fail "$cudart is missing; run 'make' first"

# run FIXTURE ARGS...: trun-topo with the fixture's environment (stdout/stderr to $tmp/o, $tmp/e).
run() {
  local d=$fx/$1 lib=/nonexistent/libnvidia-ml.so.1 rt=/nonexistent/libcudart.so
  shift
  [ -f "$d/nvml.json" ] && lib=$shim
  [ -f "$d/cudart.json" ] && rt=$cudart
  local -a vars=()
  [ -s "$d/env" ] && mapfile -t vars <"$d/env"
  [ -d "$d/cgroup" ] && vars+=("TRUN_CGROUP_ROOT=$d/cgroup")
  # A clean environment: the user's NCCL_* / FI_* variables would show up in "env".
  env -i PATH="$PATH" \
    TRUN_SYSFS_ROOT="$d/sys" TRUN_DEV_ROOT="$d/dev" TRUN_DMI_ROOT="$d/dmi" TRUN_NVML_LIBRARY="$lib" \
    TRUN_FAKE_NVML_TOPO="$d/nvml.json" TRUN_CUDART_LIBRARY="$rt" TRUN_FAKE_CUDART_TOPO="$d/cudart.json" \
    AWS_EC2_METADATA_DISABLED=true "${vars[@]}" "$topo" "$@" \
    >"$tmp/o" 2>"$tmp/e"
}

n=0
for d in "$fx"/*/; do
  name=$(basename "$d")
  [ -f "$d/expected.json" ] || fail "$name: no expected.json"
  rc=0
  run "$name" --json --no-imds || rc=$?
  [ $rc -eq 0 ] || fail "$name: exit $rc: $(cat "$tmp/e")"
  [ ! -s "$tmp/e" ] || fail "$name: unexpected stderr: $(cat "$tmp/e")"
  diff -u "$d/expected.json" "$tmp/o" || fail "$name: trun-topo --json differs from $d/expected.json"
  rc=0
  run "$name" --no-imds || rc=$?
  [ $rc -eq 0 ] || fail "$name: table form: exit $rc: $(cat "$tmp/e")"
  if [ "$name" = cpu-only ]; then # no GPU, no RDMA device: one line instead of an empty matrix and its legend
    grep -q "^no NVIDIA GPU (GPU discovery: none) and no RDMA device here: no topology to show$" "$tmp/o" ||
      fail "$name: table form does not say there is nothing to show: $(cat "$tmp/o")"
    ! grep -q "Legend" "$tmp/o" || fail "$name: a legend without a matrix: $(cat "$tmp/o")"
  else
    grep -q "^Legend:" "$tmp/o" || fail "$name: table form has no legend: $(cat "$tmp/o")"
  fi
  if [ -f "$d/nvml.json" ] || [ -f "$d/cudart.json" ]; then
    grep -q "^P2P read" "$tmp/o" || fail "$name: table form has no P2P matrix: $(cat "$tmp/o")"
  fi
  echo "ok $name"
  n=$((n + 1))
done
[ $n -ge 9 ] || fail "only $n fixtures"

# The CUDA runtime fallback's table: its P2P matrix (CUDA_VISIBLE_DEVICES=3,0,1 applied once, by the runtime).
run pcie-cudart --no-imds
printf 'P2P read\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNS\tNS\nGPU1\tNS\t X \tOK\nGPU2\tNS\tOK\t X \n' >"$tmp/want"
grep -A3 "^P2P read" "$tmp/o" | diff -u "$tmp/want" - || fail "pcie-cudart: P2P matrix of the table"
grep -q "^GPUs: 3 (cudart)" "$tmp/o" || fail "pcie-cudart: table does not say the CUDA runtime: $(cat "$tmp/o")"

# An entry that names no GPU: like CUDA, it and the rest are hidden; stderr names it; exit 0.
d=$fx/p4d.24xlarge
env -u NVIDIA_VISIBLE_DEVICES TRUN_SYSFS_ROOT="$d/sys" TRUN_DEV_ROOT="$d/dev" TRUN_DMI_ROOT="$d/dmi" \
  TRUN_NVML_LIBRARY="$shim" TRUN_FAKE_NVML_TOPO="$d/nvml.json" CUDA_VISIBLE_DEVICES=3,9,1 \
  "$topo" --json --no-imds >"$tmp/o" 2>"$tmp/e" || fail "bad CUDA_VISIBLE_DEVICES: exit $?"
grep -q "'9'" "$tmp/e" || fail "bad CUDA_VISIBLE_DEVICES: stderr does not name '9': $(cat "$tmp/e")"
python3 - "$tmp/o" <<'PY' || fail "bad CUDA_VISIBLE_DEVICES: wrong GPUs: $(cat "$tmp/o")"
import json, sys
d = json.load(open(sys.argv[1]))
assert [g["nvml_index"] for g in d["gpus"]] == [3] and d["nproc_auto"] == 1, d
PY

"$topo" --help >"$tmp/o" 2>"$tmp/e" || fail "--help: exit $?"
grep -q -- "--json" "$tmp/o" || fail "--help does not list --json"
rc=0
"$topo" --bogus >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc -eq 2 ] || fail "--bogus: exit $rc, want 2"
[ "$(wc -l <"$tmp/e")" -eq 1 ] && grep -q -- "--bogus" "$tmp/e" || fail "--bogus: stderr: $(cat "$tmp/e")"
echo "PASS: $n fixtures"

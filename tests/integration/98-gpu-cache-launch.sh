#!/usr/bin/env bash
# The per-boot GPU cache on the launch path (issue 39): a p4d node of 8 GPUs (the fake NVML, its /proc from
# tests/helpers/fake_proc_nvidia.py) and workers that record their environment; local rank 0 also records how
# many nvmlInit_v2 calls were made before it started, then creates the file the fake NVML's nvmlInit_v2 waits
# for (TRUN_FAKE_NVML_INIT_GATE): whatever asks NVML before the workers start is counted, whatever asks it
# afterwards (the health probe, the Xid watcher) cannot get ahead of the count. No timing.
#   1. cold (no cache): NVML before the workers, the cache written (0600, in a 0700 directory of
#      $XDG_RUNTIME_DIR); warm: no NVML before the workers (--nproc-per-node gpu: 8 workers) and every worker's
#      environment the cold run's; --gpu-cache off (TRUN_GPU_CACHE=off too): NVML again, the same environment.
#   2. CUDA_VISIBLE_DEVICES=5,2 from the cache: 2 workers, no NVML before them.
#   3. a damaged cache: discovered again (a debug line says why), rewritten, the job runs (exit 0).
#   4. --health-check warn, GPUs from the cache, GPU 0 with uncorrectable ECC errors: the FAIL line comes while
#      the workers run (the worker waits for it) and the job goes on; --health-check fail still checks before
#      joining (exit 3, no worker started).
#   5. the topology changed since the cache was written (GPU 7 lost its NVLinks): the warm launch warns that
#      NVML now says otherwise, and the next launch's workers get NCCL_P2P_LEVEL as NVML says (unset).
#   6. the rest of the launch path: the guard's stdout and stderr are /dev/null (a caller reading trun's output
#      to its end is not held by it), and the look for strays reads the agent's descendants only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
shim=$build/libnvidia-ml-fake.so
[ -f "$shim" ] || fail "$shim is missing; run make"
fx=$repo/tests/fixtures/nodes/p4d.24xlarge

cp "$fx/nvml.json" "$tmp/nvml.json"
"$host_py" "$repo/tests/helpers/fake_proc_nvidia.py" "$tmp/nvml.json" "$tmp/proc"
mkdir -m 700 "$tmp/run"
cache=$tmp/run/trun/gpus.cache
cat >"$tmp/worker.sh" <<'EOF'
#!/bin/sh
# worker.sh OUT [WAIT_FOR]: the environment into OUT/env.<local rank>; local rank 0: the nvmlInit_v2 calls so
# far into OUT/inits, then the gate; with WAIT_FOR, until the agent's stderr ($AGENT_ERR) has that text.
env | sort >"$1/env.$LOCAL_RANK"
if [ "$LOCAL_RANK" = 0 ]; then
  n=0
  [ -f "$TRUN_FAKE_NVML_INIT_LOG" ] && n=$(wc -l <"$TRUN_FAKE_NVML_INIT_LOG")
  echo "$n" >"$1/inits"
  : >"$TRUN_FAKE_NVML_INIT_GATE"
  if [ -n "${2:-}" ]; then
    i=0
    until grep -q "$2" "$AGENT_ERR"; do
      i=$((i + 1))
      [ $i -lt 400 ] || { echo "worker: no '$2' from the agent" >&2; exit 9; }
      sleep 0.05
    done
  fi
fi
EOF
chmod +x "$tmp/worker.sh"

export TRUN_NVML_LIBRARY=$shim TRUN_FAKE_NVML_TOPO=$tmp/nvml.json TRUN_SYSFS_ROOT=$fx/sys TRUN_DEV_ROOT=$fx/dev \
  TRUN_DMI_ROOT=$fx/dmi TRUN_PROC_ROOT=$tmp/proc XDG_RUNTIME_DIR=$tmp/run TRUN_FAKE_NVML_INIT_LOG=$tmp/init.log \
  TRUN_FAKE_NVML_INIT_GATE=$tmp/gate TRUN_LOG_LEVEL=debug AWS_EC2_METADATA_DISABLED=true TRUN_SHM_PATH=$tmp
unset CUDA_VISIBLE_DEVICES NVIDIA_VISIBLE_DEVICES TRUN_GPU_CACHE

# launch NAME [trun options...] -- [worker args...]: one job; NAME's files in $tmp/NAME; rc in $rc.
launch() {
  local name=$1 opts=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  mkdir -p "$tmp/$name"
  rm -f "$tmp/init.log"
  echo "== $name: trun ${opts[*]}"
  rc=0
  AGENT_ERR=$tmp/$name.err timeout 60 "$trun" "${opts[@]}" --standalone --no-python "$tmp/worker.sh" "$tmp/$name" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}

# inits NAME: nvmlInit_v2 calls before local rank 0 started.
inits() { cat "$tmp/$1/inits" 2>/dev/null || echo "none (no worker)"; }

# same_env A B: every rank's environment alike but for what each run has of its own.
same_env() {
  local f
  for f in "$tmp/$1"/env.*; do
    diff <(grep -Ev '^(TORCHELASTIC_RUN_ID|MASTER_PORT|TORCHELASTIC_ERROR_FILE|NCCL_RAS_ADDR|TORCH_FR_DUMP_TEMP_FILE|TORCH_NCCL_DEBUG_INFO_(TEMP|PIPE)_FILE|AGENT_ERR)=' "$f") \
      <(grep -Ev '^(TORCHELASTIC_RUN_ID|MASTER_PORT|TORCHELASTIC_ERROR_FILE|NCCL_RAS_ADDR|TORCH_FR_DUMP_TEMP_FILE|TORCH_NCCL_DEBUG_INFO_(TEMP|PIPE)_FILE|AGENT_ERR)=' "$tmp/$2/$(basename "$f")") ||
      fail "$2's $(basename "$f") differs from $1's"
  done
}

echo "== 1. cold, warm, off"
: >"$tmp/gate"
launch cold --nproc-per-node gpu --
[ $rc = 0 ] || { show "$tmp/cold.err"; fail "cold: exit $rc"; }
[ "$(inits cold)" -ge 1 ] || fail "cold: $(inits cold) nvmlInit_v2 before the workers, want NVML's discovery"
grep -q "node discovery: 8 GPU(s) (nvml, GPU cache written)" "$tmp/cold.err" || { show "$tmp/cold.err"; fail "cold: no 'GPU cache written'"; }
[ "$(stat -c %a "$cache")" = 600 ] && [ "$(stat -c %a "$tmp/run/trun")" = 700 ] ||
  fail "cache modes: $(stat -c '%a %n' "$cache" "$tmp/run/trun")"
grep -q "NCCL_P2P_LEVEL=NVL" "$tmp/cold/env.0" || fail "cold: the workers lack NCCL_P2P_LEVEL=NVL (every pair NV12)"

rm -f "$tmp/gate"
launch warm --nproc-per-node gpu --
[ $rc = 0 ] || { show "$tmp/warm.err"; fail "warm: exit $rc"; }
[ "$(inits warm)" = 0 ] || { show "$tmp/warm.err"; fail "warm: $(inits warm) nvmlInit_v2 before the workers started, want 0"; }
[ "$(ls "$tmp/warm" | grep -c '^env\.')" = 8 ] || fail "warm: --nproc-per-node gpu started $(ls "$tmp/warm" | grep -c '^env\.') workers, want 8"
grep -q "node discovery: 8 GPU(s) (nvml, from the GPU cache)" "$tmp/warm.err" || { show "$tmp/warm.err"; fail "warm: no 'from the GPU cache'"; }
same_env cold warm

: >"$tmp/gate"
launch off --gpu-cache off --nproc-per-node gpu --
[ $rc = 0 ] && [ "$(inits off)" -ge 1 ] || { show "$tmp/off.err"; fail "--gpu-cache off: exit $rc, $(inits off) nvmlInit_v2 before the workers (want NVML)"; }
same_env cold off
TRUN_GPU_CACHE=off launch offenv --nproc-per-node gpu --
[ $rc = 0 ] && [ "$(inits offenv)" -ge 1 ] || fail "TRUN_GPU_CACHE=off: exit $rc, $(inits offenv) nvmlInit_v2 before the workers"
echo "ok: warm launch without NVML, the same environment"

echo "== 2. CUDA_VISIBLE_DEVICES from the cache"
rm -f "$tmp/gate"
CUDA_VISIBLE_DEVICES=5,2 launch cvd --nproc-per-node gpu --
[ $rc = 0 ] && [ "$(inits cvd)" = 0 ] || { show "$tmp/cvd.err"; fail "CUDA_VISIBLE_DEVICES=5,2: exit $rc, $(inits cvd) nvmlInit_v2 before the workers"; }
[ "$(ls "$tmp/cvd" | grep -c '^env\.')" = 2 ] && grep -q "^CUDA_VISIBLE_DEVICES=5,2$" "$tmp/cvd/env.1" ||
  fail "CUDA_VISIBLE_DEVICES=5,2: $(ls "$tmp/cvd")"
echo "ok"

echo "== 3. a damaged cache"
printf 'X' | dd of="$cache" bs=1 seek=5000 conv=notrunc status=none
: >"$tmp/gate"
launch damaged --nproc-per-node gpu --
[ $rc = 0 ] || { show "$tmp/damaged.err"; fail "damaged cache: exit $rc"; }
grep -q "GPU cache: .*fails its checksum" "$tmp/damaged.err" && grep -q "GPU cache written" "$tmp/damaged.err" ||
  { show "$tmp/damaged.err"; fail "damaged cache: not said at debug level, or not rewritten"; }
! grep -q "error" "$tmp/damaged.err" || fail "damaged cache: an error line: $(grep error "$tmp/damaged.err")"
echo "ok"

echo "== 4. the health gate: warn in the background, fail before joining"
"$host_py" - "$tmp/nvml.json" "$tmp/nvml-ecc.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["gpus"][0]["ecc_volatile_uncorrected"] = 2
json.dump(d, open(sys.argv[2], "w"))
PY
rm -f "$tmp/gate"
TRUN_FAKE_NVML_TOPO=$tmp/nvml-ecc.json launch ecc --nproc-per-node 2 -- "trun: health: FAIL ecc"
[ $rc = 0 ] && [ "$(inits ecc)" = 0 ] || { show "$tmp/ecc.err"; fail "warn: exit $rc, $(inits ecc) nvmlInit_v2 before the workers"; }
grep -q "trun: health: FAIL ecc \[GPU 0 GPU-f9caa9b0-5ce1-5b37-9805-60c0fdd20ebb: 2\]" "$tmp/ecc.err" &&
  grep -q "continuing (--health-check=warn" "$tmp/ecc.err" || { show "$tmp/ecc.err"; fail "warn: no FAIL ecc line"; }
: >"$tmp/gate"
TRUN_FAKE_NVML_TOPO=$tmp/nvml-ecc.json launch eccfail --health-check fail --nproc-per-node 2 --
[ $rc = 3 ] && [ ! -e "$tmp/eccfail/env.0" ] || { show "$tmp/eccfail.err"; fail "fail: exit $rc (want 3), workers: $(ls "$tmp/eccfail")"; }
echo "ok"

echo "== 5. the topology changed since the cache was written"
"$host_py" - "$tmp/nvml.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["gpus"][7]["nvswitch_links"] = 0
json.dump(d, open(sys.argv[1], "w"))
PY
rm -f "$tmp/gate"
launch changed --nproc-per-node gpu -- "GPU cache: NVML now says"
[ $rc = 0 ] || { show "$tmp/changed.err"; fail "changed: exit $rc"; }
grep -q "trun: warning: GPU cache: NVML now says GPUs 0 and 7 are" "$tmp/changed.err" ||
  { show "$tmp/changed.err"; fail "changed: no warning"; }
grep -q "NCCL_P2P_LEVEL=NVL" "$tmp/changed/env.0" || fail "changed: this launch's workers should still have the cached plan"
rm -f "$tmp/gate"
launch after --nproc-per-node gpu --
[ $rc = 0 ] && [ "$(inits after)" = 0 ] || { show "$tmp/after.err"; fail "after: exit $rc, $(inits after) nvmlInit_v2 before the workers"; }
! grep -q "NCCL_P2P_LEVEL" "$tmp/after/env.0" || fail "after: the renewed cache still says every pair is NVLink"
echo "ok"

echo "== 6. the rest of the launch path: nothing of trun's keeps the caller's output open after it exits"
cat >"$tmp/guardfd.sh" <<'EOF'
#!/bin/sh
# The agent's guard: its child in a session of its own named trun; where its stdout and stderr point.
for d in /proc/[0-9]*; do
  set -- $(sed 's/^[0-9]* (\(.*\)) /\1 /' "$d/stat" 2>/dev/null)
  [ "${1:-}" = trun ] && [ "${3:-}" = "$PPID" ] && [ "${5:-}" = "${d#/proc/}" ] || continue
  echo "guard ${d#/proc/}: $(readlink "$d/fd/1") $(readlink "$d/fd/2")" >"$OUT"
done
EOF
chmod +x "$tmp/guardfd.sh"
OUT=$tmp/guardfd.txt "$trun" --standalone --nproc-per-node 1 --no-python "$tmp/guardfd.sh" 2>"$tmp/guardfd.err" | cat >/dev/null ||
  { show "$tmp/guardfd.err"; fail "guardfd: exit $?"; }
grep -q "guard [0-9]*: /dev/null /dev/null" "$tmp/guardfd.txt" ||
  fail "the guard keeps the caller's stdout/stderr: $(cat "$tmp/guardfd.txt" 2>/dev/null || echo 'no guard found')"
grep -q "strays: /proc looked at in .* process(es): the agent and its descendants" "$tmp/guardfd.err" ||
  { show "$tmp/guardfd.err"; fail "the look for strays read every process of the box, not the agent's descendants"; }
echo "ok"

echo "PASS: the GPU cache takes NVML off the launch path and changes nothing the workers get"

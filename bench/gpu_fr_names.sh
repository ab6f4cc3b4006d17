#!/usr/bin/env bash
# bench/gpu_fr_names.sh: which flight-recorder variable names the GPU box's torch reads, through trun (agent/agent_fr.c):
# a one-rank NCCL job under TRUN_BIN/trun (the tree) and OLD_BIN/trun (a tree before, optional), each with --log-dir:
# the worker's torch version as trun found it (--dry-run), whether a rank printed torch's "is deprecated"
# warning for a variable trun set, whether torch made the dump pipe <dir>/rank_0.pipe, and whether a byte written
# to it made rank 0 dump <dir>/rank_0. Results in $OUT/<date>-<gpu>-fr-names/. NVLS stays off.
set -u
cd "$(dirname "$0")/.." || exit 2
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/build/gpu-results}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -cd 'A-Za-z0-9' | tr 'A-Z' 'a-z' | sed 's/nvidia//')
n=$(nvidia-smi -L 2>/dev/null | wc -l)
R=$OUT/$(date -u +%F)-${gpu:-nogpu}x$n-fr-names
mkdir -p "$R"
cat >"$R/worker.py" <<'PY'
import os, time, torch, torch.distributed as dist
d = os.environ["FR_OUT"]
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
open(os.path.join(d, "ready"), "w").write(torch.__version__)
for _ in range(300):
    if os.path.exists(os.path.join(d, "done")):
        break
    dist.all_reduce(x)
    torch.cuda.synchronize()
    time.sleep(0.05)
dist.destroy_process_group()
PY
one() { # one NAME BIN
  local name=$1 bin=$2 d=$R/$1
  mkdir -p "$d/logs"
  echo "== $name: $("$bin/trun" --version 2>&1 | head -1)"
  TRUN_LOG_LEVEL=debug "$bin/trun" --dry-run --standalone --nproc-per-node 1 "$R/worker.py" >"$d/dry.out" 2>"$d/dry.err"
  grep -h "flight recorder: the workers' torch" "$d/dry.err" | sed 's/ (agent_fr.*//'
  grep -h "BUFFER_SIZE" "$d/dry.out"
  FR_OUT=$d timeout 90 "$bin/trun" --standalone --nproc-per-node 1 --log-dir "$d/logs" "$R/worker.py" >"$d/job.out" 2>"$d/job.err" &
  local job=$!
  for _ in $(seq 600); do [ -f "$d/ready" ] && break; sleep 0.1; done
  local pipe
  pipe=$(find "$d/logs" -name 'rank_0.pipe' 2>/dev/null | head -1)
  echo "torch $(cat "$d/ready" 2>/dev/null); dump pipe: ${pipe:-none}"
  if [ -n "$pipe" ]; then
    timeout 5 sh -c "echo 1 > '$pipe'"
    local dump=${pipe%.pipe}
    for _ in $(seq 100); do [ -s "$dump" ] && break; sleep 0.1; done
    [ -s "$dump" ] && echo "dump after a byte to the pipe: $(stat -c %s "$dump") bytes" || echo "no dump after a byte to the pipe"
  fi
  touch "$d/done"
  wait $job
  echo "trun exit $?"
  echo "deprecation warnings: $(grep -c 'is deprecated' "$d/job.err")"
  grep -h 'is deprecated' "$d/job.err" | head -2 | cut -c1-200
}
one new "${TRUN_BIN:-build/portable}"
[ -n "${OLD_BIN:-}" ] && one old "$OLD_BIN"

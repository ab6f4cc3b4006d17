#!/usr/bin/env bash
# bench/gpu4.sh CALL: issue 39's runs on an N-GPU box (written for 4 x H200, any N >= 2), in two device calls of
# at most 9 minutes each (run with timeout_s 600; the script keeps to GPU4_LIMIT, 540 s, and skips what would
# not fit, saying so). Build first here with `make portable` and carry build/portable; on the box:
#   call 1: bash bench/gpu4.sh 1    health + nvlink views (~40 s), trun-topo vs nvidia-smi (~30 s), node loss
#                                   2 agents x N/2: crash, kill, stop; c10d / trun; cold / warm / warm-cuda;
#                                   torchrun 2.11; NCCL_HOSTID apart (bench/gpu_nodeloss.py, the rest, ~420 s)
#   call 2: bash bench/gpu4.sh 2    crash floor on 1 x N with the NCCL variants and their busbw cost
#                                   (bench/gpu_recovery4.py, ~220 s), layouts 1xN / 2xN/2 / Nx1 with the doctor
#                                   and --nccl-report (~100 s), preflight vs torch (~60 s), DDP and FSDP
#                                   examples on N GPUs, trun vs torchrun (~60 s each)
#   call 3 (optional): bash bench/gpu4.sh 3   the rest of bench/gpu.py's steps at N GPUs: worker environment,
#                                   launch (2, N, 8 workers), NCCL busbw via trun and torchrun, the c10d mixed
#                                   fleet (2 agents x N/2), the stall detector (~4 min)
#   call 4: bash bench/gpu4.sh 4    what issue 39's acceptance still needs from the tree that sets
#                                   NCCL_CUMEM_ENABLE=0 itself: launch with the GPU cache (bench/gpu_launch.py,
#                                   ~80 s), the crash floor 1 x N warm-cuda, warm-cuda + --warm-start-nccl and
#                                   torchrun (~140 s), node loss 2 x N/2 killed (warm-cuda, + warm-start-nccl) and
#                                   silent on both backends and torchrun silent (~250 s), FSDP under torchrun and
#                                   trun (~80 s), and if time is left bench/gpu_warm_nccl.py once (~50 s) and
#                                   bench/gpu_topo_hang_find.sh (~20 s)
# Each step writes $OUT/<date>-<gpu>-<step>/ (gpu.py: $OUT/<date>-<gpu>-health.json or -gpu.json and the folder
# of the same name); at the end each folder is packed into $OUT/<folder>.tgz (the device returns at most 8
# files): unpack them into bench/results/. The whole console of every step is in $OUT/console-<call>.txt; the
# screen gets each step's short lines (the device returns the last 12,000 characters).
# On a CPU box (a try of the scripts: gloo, one CPU worker a GPU): GPU4_BACKEND=gloo GPU_BENCH_CPU=2
# TRUN_BIN=build PYTHON=/usr/bin/python3 bash bench/gpu4.sh 1 (or 2); a step that needs a GPU says so.
set -u
cd "$(dirname "$0")/.." || exit 2
CALL=${1:-}
case "$CALL" in
  1 | 2 | 3 | 4) ;;
  *) echo "usage: bash bench/gpu4.sh 1|2|3|4 (the first, second, the optional third or the acceptance call)" >&2 && exit 2 ;;
esac
# NVLink multicast stays off on the shared GPU box, in every environment this starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OUT=${OUT:-$PWD/build/gpu-results}
export TRUN_BIN=${TRUN_BIN:-$PWD/build/portable}
PY=${PYTHON:-python3}
export PYTHON=$PY
BACKEND=${GPU4_BACKEND:-nccl}
export GPU_NL_BACKEND=$BACKEND GPU_R4_BACKEND=$BACKEND
LIMIT=${GPU4_LIMIT:-540}
START=$(date +%s)
mkdir -p "$OUT"
CONSOLE="$OUT/console-$CALL.txt"
: >"$CONSOLE"

left() { echo $((LIMIT - ($(date +%s) - START))); }

# Every process a bench script started for a job carries GPU_BENCH_JOB: none may outlive its step.
reap() {
  local p
  for p in /proc/[0-9]*; do
    if grep -qa 'GPU_BENCH_JOB=' "$p/environ" 2>/dev/null; then kill -9 "${p#/proc/}" 2>/dev/null; fi
  done
}

# step NAME CAP LINES CMD...: CMD under a time limit of min(CAP, what is left - 25 s); its whole output into the
# console file, its last LINES short lines (no indented ones, 240 characters at most) on the screen.
step() {
  local name=$1 cap=$2 lines=$3 t
  shift 3
  t=$(left)
  t=$((t - 25))
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 20 ]; then
    echo "== $name: skipped, $(left) s of the call left" | tee -a "$CONSOLE"
    return
  fi
  echo "== $name (at most $t s)" | tee -a "$CONSOLE"
  local s0 tmp rc
  s0=$(date +%s)
  tmp=$(mktemp)
  timeout -k 15 "$t" "$@" >"$tmp" 2>&1
  rc=$?
  cat "$tmp" >>"$CONSOLE"
  grep -v '^[[:space:]]' "$tmp" | cut -c1-240 | tail -n "$lines"
  rm -f "$tmp"
  reap
  local why=""
  [ $rc = 124 ] && why=" (its time limit: what it measured is saved)"
  echo "== $name: exit $rc, $(($(date +%s) - s0)) s$why" | tee -a "$CONSOLE"
}

# pack: each result folder under $OUT (and gpu.py's JSON beside it) into $OUT/<folder>.tgz.
pack() {
  local d b
  for d in "$OUT"/*/; do
    [ -d "$d" ] || continue
    b=$(basename "$d")
    if [ -f "$OUT/$b.json" ]; then
      tar czf "$OUT/$b.tgz" -C "$OUT" "$b" "$b.json" && rm -rf "${OUT:?}/$b" "$OUT/$b.json"
    else
      tar czf "$OUT/$b.tgz" -C "$OUT" "$b" && rm -rf "${OUT:?}/$b"
    fi
  done
}
trap 'reap; pack' EXIT

{
  echo "== call $CALL: $(date -u +%FT%TZ), backend $BACKEND, trun $("$TRUN_BIN/trun" --version 2>&1 | head -1)"
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), "GPU(s)")' 2>&1 | tail -1
  nvidia-smi topo -m 2>&1 | head -24
} | tee -a "$CONSOLE"

if [ "$CALL" = 1 ]; then
  step health 75 8 env GPU_STEPS=health GPU_RESULT_SUFFIX=health "$PY" bench/gpu.py
  step topo 45 6 "$PY" bench/gpu_topo.py
  t=$(($(left) - 40))
  step nodeloss 500 60 env GPU_NL_BUDGET=$((t - 30)) "$PY" bench/gpu_nodeloss.py
elif [ "$CALL" = 3 ]; then
  export GPU_RESULT_SUFFIX=gpu3
  step envcmp 90 4 env GPU_STEPS=envcmp "$PY" bench/gpu.py
  step launch 120 10 env GPU_STEPS=launch "$PY" bench/gpu.py
  step nccl 90 4 env GPU_STEPS=nccl "$PY" bench/gpu.py
  step c10d 150 4 env GPU_STEPS=c10d "$PY" bench/gpu.py
  step stall 120 4 env GPU_STEPS=stall "$PY" bench/gpu.py
elif [ "$CALL" = 4 ]; then
  step launch 95 16 env GPU_LAUNCH_BUDGET=80 "$PY" bench/gpu_launch.py
  step recovery4 150 10 env GPU_R4_STEPS=recovery GPU_R4_BUDGET=140 GPU_R4_CRASHES=2 \
    GPU_R4_CONFIGS=trun-warm-cuda,trun-warm-cuda-nccl,torchrun "$PY" bench/gpu_recovery4.py
  nl=trun-trun-warm-cuda-kill,trun-trun-warm-nccl-kill,trun-c10d-warm-cuda-kill,trun-c10d-warm-nccl-kill
  nl=$nl,trun-trun-warm-cuda-stop,trun-c10d-warm-cuda-stop,torchrun-stop
  t=$(($(left) - 100))
  step nodeloss 300 30 env GPU_NL_BUDGET=$((t - 30)) GPU_NL_CONFIGS=$nl "$PY" bench/gpu_nodeloss.py
  export GPU_RESULT_SUFFIX=gpu4
  step fsdp 100 8 env GPU_STEPS=fsdp GPU_DDP_REPS=1 "$PY" bench/gpu.py
  # if time is left: --warm-start-nccl's checks at N ranks (RAS at the workers' own ports, pool memory)
  step warmnccl 80 8 env GPU_WN_REPS=1 "$PY" bench/gpu_warm_nccl.py
  # and `trun-topo hang --once` with no address while an N-GPU job runs (it finds the job's RAS port)
  step topohang 40 8 bash bench/gpu_topo_hang_find.sh
else
  # the crash floor: the NCCL variants in this order (the budget drops the tail), then their busbw cost
  c=trun-warm-cuda
  configs=$c,$c+debug_init,$c+cumem0,$c+topofile,$c+cumem0+debug_init,$c+cumem0+topo+graph,$c+nonet,trun-warm
  step recovery4 250 22 env GPU_R4_STEPS=recovery,busbw GPU_R4_BUDGET=215 GPU_R4_CRASHES=2 \
    GPU_R4_CONFIGS=$configs GPU_R4_BUSBW=default,cumem0,topofile,nonet "$PY" bench/gpu_recovery4.py
  # gpu.py's steps, one a run, into one result ($OUT/<date>-<gpu>-gpu.json and its folder)
  export GPU_RESULT_SUFFIX=gpu
  step layouts 120 8 env GPU_STEPS=layouts "$PY" bench/gpu.py
  step preflight 80 8 env GPU_STEPS=preflight GPU_PREFLIGHT_EAGER=0 "$PY" bench/gpu.py
  step ddp+fsdp 150 8 env GPU_STEPS=ddp,fsdp GPU_DDP_REPS=2 "$PY" bench/gpu.py
fi
echo "== call $CALL done in $(($(date +%s) - START)) s; results: $OUT/*.tgz (unpack into bench/results/)," \
  "whole console $CONSOLE" | tee -a "$CONSOLE"

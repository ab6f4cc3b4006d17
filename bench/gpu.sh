#!/usr/bin/env bash
# bench/gpu.sh: every benchmark and interop check that needs the GPU box (torch 2.11, NCCL), in one call of
# under 9 minutes (GPU_STEPS=preflight runs only the preflight / NCCL-report step, ~3 min). Build first here with `make portable` (libuv and jansson linked in: the GPU box has
# neither), then on the box: `bash bench/gpu.sh` with build/portable carried. Results: $OUT/gpu-results.json.
set -u
cd "$(dirname "$0")/.."
# NVLink multicast stays off on the shared GPU box, in every environment this starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OUT=${OUT:-$PWD/build/gpu-results}
mkdir -p "$OUT"
nvidia-smi -L >"$OUT/gpus.txt" 2>&1 || true
nvidia-smi topo -m >>"$OUT/gpus.txt" 2>&1 || true
exec python3 bench/gpu.py

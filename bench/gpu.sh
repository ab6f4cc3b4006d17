#!/usr/bin/env bash
# bench/gpu.sh: every benchmark and interop check that needs the GPU box (torch 2.11, NCCL), in one call of
# under 9 minutes (GPU_STEPS=preflight runs only the preflight / NCCL-report step, ~3 min; GPU_STEPS=onegpu, a
# call of its own of ~8 min, the 1-GPU proxy of the 2-GPU preflight and DDP comparisons). Build first here with
# `make portable` (libuv and jansson linked in: the GPU box has neither), then on the box: `bash bench/gpu.sh`
# with build/portable carried. Results: $OUT/<date>-<gpu>.json (e.g. 2026-11-22-h200x2.json, the GPU from
# nvidia-smi) and its logs in $OUT/<date>-<gpu>/: copy both into bench/results/ as they are and commit them;
# `make bench` (or bench/plots.py + bench/readme.py) puts them in docs/results.md.
set -u
cd "$(dirname "$0")/.."
# NVLink multicast stays off on the shared GPU box, in every environment this starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OUT=${OUT:-$PWD/build/gpu-results}
mkdir -p "$OUT"
exec python3 bench/gpu.py

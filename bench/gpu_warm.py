"""Warm start on the GPU box (issue 31), one call: (1) a worker's crash until both replacements imported torch,
set up CUDA (a first tensor on GPU 0), formed their gloo group and all-reduced, 2 workers on GPU 0: trun cold vs
trun --warm-start vs torchrun (bench.py's warm part, CUDA visible); (2) the pool's resident memory per worker;
(3) bench/gpu_recovery.py's node-loss recovery with and without --warm-start (GPU_REC_LAUNCHERS).
Run on the GPU box: python3 bench/gpu_warm.py (TRUN_BIN: the directory of trun, default build/portable).
Writes $OUT/<date>-gpu-warm.json; copy it into bench/results/. On a CPU box, to try the script:
GPU_WARM_CUDA=0 GPU_REC_BACKEND=gloo TRUN_BIN=build python3 bench/gpu_warm.py.
"""
import datetime
import json
import os
import sys

import bench  # bench/bench.py: warm_bench
import gpu_recovery

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
OUT = os.environ.get("OUT", os.path.join(bench.REPO, "build", "gpu-results"))
TRUN = os.path.join(os.environ.get("TRUN_BIN", os.path.join(bench.REPO, "build", "portable")), "trun")


def main():
    import torch
    os.makedirs(OUT, exist_ok=True)
    reps = int(os.environ.get("GPU_WARM_REPS", "2"))
    names = {"trun": [TRUN], "trun-warm": [TRUN, "--warm-start"],
             "torchrun-" + torch.__version__.split("+")[0]: [sys.executable, "-m", "torch.distributed.run"]}
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "cpus": os.cpu_count()}
    res["warm"] = bench.warm_bench(reps, settle=8.0, names=names, py=sys.executable, trun=TRUN,
                                   extra_env={"WARM_CUDA": os.environ.get("GPU_WARM_CUDA", "1"),
                                              "CUDA_VISIBLE_DEVICES": "0", "NCCL_NVLS_ENABLE": "0"})
    path = os.path.join(OUT, datetime.date.today().isoformat() + "-gpu-warm.json")
    json.dump(res, open(path, "w"), indent=1)
    print(json.dumps(res["warm"], indent=1), flush=True)
    os.environ.setdefault("GPU_REC_LAUNCHERS", "trun-c10d,trun-c10d-warm,trun-trun,trun-trun-warm")
    gpu_recovery.main()
    print(f"results: {path}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# On a GPU box (build/portable carried): `trun-topo hang --once` with no address while a real NCCL job runs
# under trun (one worker a GPU, an all-reduce every 50 ms for 12 s): it must find the job's own RAS port and
# get NCCL's answer. Writes $OUT/<date>-<gpu>-topo-hang-find/ (the tool's output and the job's).
set -u
cd "$(dirname "$0")/.." || exit 2
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
unset NCCL_RAS_ADDR
BIN=${TRUN_BIN:-$PWD/build/portable}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
n=$(nvidia-smi -L | wc -l)
d=${OUT:-build/gpu-results}/$(date -u +%F)-${gpu}x$n-topo-hang-find
mkdir -p "$d"
cat >"$d/worker.py" <<'PY'
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1 << 20, device="cuda")
end = time.time() + 12
while time.time() < end:
    dist.all_reduce(x)
    torch.cuda.synchronize()
    time.sleep(0.05)
dist.destroy_process_group()
PY
"$BIN/trun" --standalone --nproc-per-node gpu "$d/worker.py" >"$d/job.out" 2>"$d/job.err" &
job=$!
sleep 7
"$BIN/trun-topo" hang --once >"$d/once.out" 2>"$d/once.err"
echo "trun-topo hang --once: exit $?" | tee "$d/once.rc"
"$BIN/trun-topo" hang --for 3 --interval 1 >"$d/watch.out" 2>"$d/watch.err"
echo "trun-topo hang --for 3: exit $?" | tee -a "$d/once.rc"
wait $job
echo "job: exit $?" | tee -a "$d/once.rc"
head -3 "$d/once.err"
head -4 "$d/once.out"
cat "$d/watch.out" "$d/watch.err" | head -4

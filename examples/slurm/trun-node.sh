#!/bin/bash
# Run by srun once per node: maps Slurm's variables onto trun's torchrun-style options and execs trun.
#   SLURM_NNODES       -> --nnodes
#   SLURM_NODEID       -> --node-rank
#   first host of SLURM_JOB_NODELIST (scontrol show hostnames expands node[01-04,07]) -> --master-addr
#   MASTER_PORT (default 29500) -> --master-port
# --nproc-per-node gpu: one worker per GPU that Slurm gave this task (CUDA_VISIBLE_DEVICES is honoured).
# Arguments: the training script and its arguments.
set -euo pipefail
: "${SLURM_NNODES:?not under srun: SLURM_NNODES is unset}" "${SLURM_NODEID:?}" "${SLURM_JOB_NODELIST:?}"
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
exec "${TRUN:-trun}" --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" \
  --master-addr "$master" --master-port "${MASTER_PORT:-29500}" \
  --nproc-per-node "${TRUN_NPROC_PER_NODE:-gpu}" "$@"

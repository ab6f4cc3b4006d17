#!/bin/bash
# Run by srun once per node: maps Slurm's variables onto trun's torchrun-style options and execs trun.
#   SLURM_NNODES       -> --nnodes
#   SLURM_NODEID       -> --node-rank
#   first host of SLURM_JOB_NODELIST (scontrol show hostnames expands node[01-04,07]) -> --master-addr
#   MASTER_PORT (default 29500) -> --master-port
# --nproc-per-node gpu: one worker per GPU that Slurm gave this task (CUDA_VISIBLE_DEVICES is honoured);
# TRUN_NPROC_PER_NODE=N on CPU-only nodes. TRUN=torchrun runs torchrun the same way.
# trun itself reads the same variables (see README.md here): this script writes the mapping out.
#   TRUN_NPROC_PER_NODE=2 srun -N3 --ntasks-per-node=1 examples/slurm/trun-node.sh examples/train_ddp.py --steps 20
# Arguments: the training script and its arguments.
set -euo pipefail
: "${SLURM_NNODES:?not under srun: SLURM_NNODES is unset}" "${SLURM_NODEID:?}" "${SLURM_JOB_NODELIST:?}"
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
exec "${TRUN:-trun}" --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" \
  --master-addr "$master" --master-port "${MASTER_PORT:-29500}" \
  --nproc-per-node "${TRUN_NPROC_PER_NODE:-gpu}" "$@"

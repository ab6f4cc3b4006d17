"""Trains a small GPT-style model with DistributedDataParallel on synthetic data (nothing is downloaded).

  trun --nproc-per-node 2 examples/train_ddp.py --steps 20            # CPU: gloo; GPUs: NCCL, one per process
  torchrun --nproc-per-node 2 examples/train_ddp.py --steps 20        # the same, under torchrun
  trun --config examples/train_ddp.yaml

Prints `step N loss X` (the loss averaged over all ranks) every step, then one `step time:` line and a
`params checksum X` line (identical on every rank when the replicas stayed in sync). With --out PATH the
losses and step times go to a JSON file (rank 0 writes PATH; every rank writes it when PATH contains {rank}).
Works with torch 1.13, 2.6 and 2.11. Exit: 0 done, 2 bad arguments or not started by trun/torchrun.
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tinygpt


def main():
    args = tinygpt.common_args("DDP training of a tiny GPT on synthetic data").parse_args()
    rank, world, local_rank, device, backend = tinygpt.setup(args)
    torch.manual_seed(args.seed)  # same init everywhere (DDP also broadcasts rank 0's parameters)
    model = tinygpt.TinyGPT(args.vocab, args.d_model, args.layers, args.heads, args.seq).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        print(f"DDP: {world} ranks, {backend} on {device.type}, {n} parameters, torch {torch.__version__}",
              flush=True)
    result = tinygpt.train(args, ddp, rank, world, device, backend, "ddp")
    result["params_checksum"] = tinygpt.param_checksum(model)
    print(f"params checksum {result['params_checksum']}", flush=True)
    tinygpt.write_out(args, rank, result)
    dist.barrier()
    tinygpt.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())

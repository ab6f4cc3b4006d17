"""Trains a small GPT-style model with FullyShardedDataParallel (FSDP) on synthetic data (nothing is downloaded).

  trun --nproc-per-node 2 examples/train_fsdp.py --steps 20           # CPU: gloo; GPUs: NCCL, one per process
  torchrun --nproc-per-node 2 examples/train_fsdp.py --steps 20
  trun --config examples/train_fsdp.yaml

Each transformer block is its own FSDP unit (transformer_auto_wrap_policy), parameters fully sharded. Output
as in train_ddp.py: `step N loss X` (mean over ranks), a `step time:` line, `params checksum X` (taken over
the gathered full parameters), and --out PATH for a JSON of the losses.

Uses torch.distributed.fsdp.FullyShardedDataParallel, the API that exists from torch 1.13 to 2.11.
Exit codes: 0 done; 2 bad arguments or not started by trun/torchrun; 77 skipped, because FSDP cannot run with
this torch build (the reason is printed on stderr), e.g. FSDP on CPU where torch rejects it. Known case: Debian's torch 1.13 on Python >= 3.11 cannot
even import torch.distributed.fsdp (a dataclass in torch/distributed/_shard has a mutable default, which
Python 3.11 rejects); use torch >= 2.0 there, or train_ddp.py.
"""
import functools
import platform
import sys

import torch
import torch.distributed as dist

import tinygpt

EXIT_SKIPPED = 77


def import_fsdp():
    """(FSDP class, wrap policy factory), or exits EXIT_SKIPPED with the reason when FSDP is unusable."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    except Exception as e:  # noqa: BLE001 - any import failure means FSDP is unusable here
        print(f"train_fsdp.py: skipped: FSDP cannot be used with torch {torch.__version__} on Python "
              f"{platform.python_version()}: importing torch.distributed.fsdp failed with "
              f"{type(e).__name__}: {e}. Use torch >= 2.0 (e.g. scripts/chroot-run.sh on the test host) or "
              f"examples/train_ddp.py. Exiting {EXIT_SKIPPED}.", file=sys.stderr, flush=True)
        sys.exit(EXIT_SKIPPED)
    return FullyShardedDataParallel, transformer_auto_wrap_policy


def main():
    args = tinygpt.common_args("FSDP training of a tiny GPT on synthetic data").parse_args()
    FSDP, transformer_auto_wrap_policy = import_fsdp()
    rank, world, local_rank, device, backend = tinygpt.setup(args)
    torch.manual_seed(args.seed)  # same full model everywhere before sharding
    model = tinygpt.TinyGPT(args.vocab, args.d_model, args.layers, args.heads, args.seq)
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={tinygpt.Block})
    if device.type == "cuda":
        fsdp = FSDP(model, auto_wrap_policy=policy, device_id=local_rank)
    else:
        # CPU parameters, gloo collectives. torch >= 2.4 needs device_id=cpu said explicitly (without it FSDP
        # looks for an accelerator); older releases may reject CPU outright: that is a skip, with the reason.
        try:
            fsdp = FSDP(model, auto_wrap_policy=policy, device_id=torch.device("cpu"))
        except (RuntimeError, ValueError, AssertionError) as e:
            print(f"train_fsdp.py: skipped: FSDP on CPU is not supported by torch {torch.__version__}: "
                  f"{type(e).__name__}: {e}. Run it on GPUs, or with torch >= 2.4 on CPU. Exiting {EXIT_SKIPPED}.",
                  file=sys.stderr, flush=True)
            sys.exit(EXIT_SKIPPED)
    local = sum(p.numel() for p in fsdp.parameters())
    with FSDP.summon_full_params(fsdp):
        full = sum(p.numel() for p in fsdp.parameters())
    print(f"FSDP rank {rank}: {world} ranks, {backend} on {device.type}, {full} parameters, {local} held "
          f"by this rank, torch {torch.__version__}", flush=True)
    result = tinygpt.train(args, fsdp, rank, world, device, backend, "fsdp")
    with FSDP.summon_full_params(fsdp):
        result["params_checksum"] = tinygpt.param_checksum(fsdp)
    result["params_total"], result["params_local"] = full, local
    print(f"params checksum {result['params_checksum']}", flush=True)
    tinygpt.write_out(args, rank, result)
    dist.barrier()
    tinygpt.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())

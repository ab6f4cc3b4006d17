"""Trains the tiny GPT of examples/tinygpt.py with DeepSpeed ZeRO-3 (deepspeed.initialize) on synthetic data.

  trun --config examples/deepspeed/train_zero3.yaml                  # one worker per GPU, ds_zero3.json
  trun --nproc-per-node gpu examples/deepspeed/train_zero3.py --deepspeed examples/deepspeed/ds_zero3.json

The DeepSpeed config is read from --deepspeed (default: ds_zero3.json next to this file). Its "auto" values
are there for the Hugging Face Trainer; this script fills them the way the Trainer would:
train_micro_batch_size_per_gpu = --batch, gradient_accumulation_steps = --grad-accum, train_batch_size =
their product times the world size, gradient_clipping = 1.0, and the stage3 "auto" sizes are dropped
(DeepSpeed's defaults). Without an "optimizer" section, AdamW with --lr is added (with offload_optimizer on
the CPU, DeepSpeed runs it as its CPU Adam). bf16 stays as the file says; on a host without CUDA the script
turns bf16 and the pinned-memory offload off and runs on the CPU with gloo, where DeepSpeed supports it.

Output as in train_ddp.py: `step N loss X` (the mean over the ranks, one line per optimizer step) and a
`step time:` line. Exit codes: 0 done; 2 bad arguments or not started by trun/torchrun; 77 skipped because
deepspeed cannot be imported in this Python (the reason is printed on stderr).
"""
import importlib.util
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def load_tinygpt():
    """examples/tinygpt.py, loaded by path: putting examples/ on sys.path would make this very directory
    (examples/deepspeed/) importable as a `deepspeed` namespace package, hiding a missing DeepSpeed."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tinygpt.py")
    spec = importlib.util.spec_from_file_location("tinygpt", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tinygpt = load_tinygpt()

EXIT_SKIPPED = 77


def import_deepspeed():
    """The deepspeed module, or exits EXIT_SKIPPED with the reason when it cannot be imported."""
    try:
        import deepspeed
        if not hasattr(deepspeed, "initialize"):  # a stray directory named deepspeed, not the package
            raise ImportError(f"'deepspeed' found at {list(getattr(deepspeed, '__path__', []))} has no initialize()")
    except Exception as e:  # noqa: BLE001 - any import failure means DeepSpeed is unusable here
        print(f"train_zero3.py: skipped: deepspeed cannot be imported in this Python ({sys.executable}, "
              f"Python {platform.python_version()}, torch {torch.__version__}): {type(e).__name__}: {e}. "
              f"Install it in the workers' Python (pip install deepspeed) to run this example. "
              f"Exiting {EXIT_SKIPPED}.", file=sys.stderr, flush=True)
        sys.exit(EXIT_SKIPPED)
    return deepspeed


def ds_config(args, world, on_cuda):
    """The --deepspeed file with its "auto" values filled in (see the module docstring)."""
    try:
        with open(args.deepspeed) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        print(f"train_zero3.py: error: cannot read the DeepSpeed config {args.deepspeed}: {e}", file=sys.stderr)
        sys.exit(2)
    cfg["train_micro_batch_size_per_gpu"] = args.batch
    cfg["gradient_accumulation_steps"] = args.grad_accum
    cfg["train_batch_size"] = args.batch * args.grad_accum * world
    if cfg.get("gradient_clipping") == "auto":
        cfg["gradient_clipping"] = 1.0
    zero = cfg.setdefault("zero_optimization", {})
    for k in [k for k, v in zero.items() if v == "auto"]:
        del zero[k]
    cfg.setdefault("optimizer", {"type": "AdamW", "params": {"lr": args.lr}})
    if not on_cuda:
        cfg["bf16"] = {"enabled": False}
        for k in ("offload_optimizer", "offload_param"):
            if isinstance(zero.get(k), dict):
                zero[k]["pin_memory"] = False
    return cfg


def main():
    ap = tinygpt.common_args("DeepSpeed ZeRO-3 training of a tiny GPT on synthetic data")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--deepspeed", default=os.path.join(here, "ds_zero3.json"),
                    help="DeepSpeed JSON config (default: ds_zero3.json next to this script)")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    args = ap.parse_args()
    if args.grad_accum < 1 or args.batch < 1 or args.steps < 1:
        ap.error("--grad-accum, --batch and --steps must be >= 1")
    deepspeed = import_deepspeed()
    rank, world, local_rank, device, backend = tinygpt.setup(args)
    torch.manual_seed(args.seed)
    model = tinygpt.TinyGPT(args.vocab, args.d_model, args.layers, args.heads, args.seq)
    cfg = ds_config(args, world, device.type == "cuda")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    data = tinygpt.MarkovData(args.vocab, args.seq, args.batch, args.seed, rank, engine.device)
    times = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        total = torch.zeros((), device=engine.device)
        for _ in range(args.grad_accum):
            x, y = data.next()
            loss = F.cross_entropy(engine(x).float().reshape(-1, args.vocab), y.reshape(-1))
            engine.backward(loss)
            engine.step()  # DeepSpeed steps the optimizer at the accumulation boundary
            total += loss.detach()
        mean = total / args.grad_accum
        dist.all_reduce(mean)
        print(f"step {step} loss {mean.item() / world:.6f}", flush=True)
        times.append(time.perf_counter() - t0)
    warm = 2 if len(times) > 4 else 0
    timed = times[warm:]
    print(f"step time: mean {1000 * statistics.mean(timed):.3f} ms, median {1000 * statistics.median(timed):.3f} "
          f"ms over steps {warm + 1}..{len(times)} (deepspeed zero3, {backend}, world {world}, "
          f"torch {torch.__version__}, deepspeed {deepspeed.__version__})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

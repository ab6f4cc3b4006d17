"""A small GPT-style model, synthetic data and the training loop shared by train_ddp.py and train_fsdp.py.

Nothing is downloaded: the data is drawn from a fixed random Markov chain over a small vocabulary (the same
chain on every rank, from --seed), so a model that learns the transition table drives the loss from
ln(vocab) towards the chain's entropy within a few dozen steps. Each rank draws different batches.

Only APIs present in torch 1.13 are used (no scaled_dot_product_attention, no torch.compile), so the same
file runs with Debian's torch 1.13, torch 2.6 and torch 2.11.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def common_args(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=50, help="optimizer steps (default 50)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step (default 8)")
    ap.add_argument("--seq", type=int, default=32, help="tokens per sequence (default 32)")
    ap.add_argument("--vocab", type=int, default=64, help="vocabulary size (default 64)")
    ap.add_argument("--d-model", type=int, default=64, help="embedding width (default 64)")
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default 3e-3)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the data chain and the init (default 1234)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: cuda + NCCL when torch.cuda.is_available(), else cpu + gloo (default auto)")
    ap.add_argument("--out", default=None,
                    help="write a JSON of the losses; rank 0 writes PATH, or every rank when PATH has {rank}")
    return ap


class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention, then a 4x GELU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        assert d % heads == 0, f"--d-model {d} must be a multiple of --heads {heads}"
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)  # no buffer: nothing to sync
        att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)  # not tied to self.tok: FSDP then needs no special care

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class MarkovData:
    """Batches from a fixed Markov chain: each token has 2 likely successors (90 % of the mass)."""

    def __init__(self, vocab, seq, batch, seed, rank, device):
        g = torch.Generator().manual_seed(seed)
        probs = torch.full((vocab, vocab), 0.1 / (vocab - 2))
        for a in range(vocab):
            succ = torch.randperm(vocab, generator=g)[:2]
            probs[a, succ] = 0.45
        self.probs = probs
        self.vocab, self.seq, self.batch, self.device = vocab, seq, batch, device
        self.g = torch.Generator().manual_seed(seed * 1009 + rank + 1)

    def next(self):
        """(inputs, targets), each batch x seq on the device."""
        toks = torch.empty(self.batch, self.seq + 1, dtype=torch.long)
        toks[:, 0] = torch.randint(self.vocab, (self.batch,), generator=self.g)
        for t in range(self.seq):
            toks[:, t + 1] = torch.multinomial(self.probs[toks[:, t]], 1, generator=self.g).squeeze(1)
        toks = toks.to(self.device)
        return toks[:, :-1], toks[:, 1:]


def setup(args):
    """init_process_group from the torchrun environment; returns (rank, world, local_rank, device, backend)."""
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False; use --device cpu", file=sys.stderr)
        sys.exit(2)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if k not in os.environ:
            print(f"error: {k} is not set: start this script with trun or torchrun, e.g. "
                  f"trun --nproc-per-node 2 {sys.argv[0]} --steps 20", file=sys.stderr)
            sys.exit(2)
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    return dist.get_rank(), dist.get_world_size(), local_rank, device, backend


def train(args, model, rank, world, device, backend, kind):
    """Runs args.steps AdamW steps; prints `step N loss X` (the mean over all ranks) and the step time."""
    data = MarkovData(args.vocab, args.seq, args.batch, args.seed, rank, device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses, times = [], []
    for step in range(1, args.steps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        x, y = data.next()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / world  # .item() also waits for the GPU
        times.append(time.perf_counter() - t0)
        losses.append(mean)
        print(f"step {step} loss {mean:.6f}", flush=True)
    warm = 2 if len(times) > 4 else 0  # the first steps pay for allocator and communicator warm-up
    timed = times[warm:]
    mean_ms = 1000 * statistics.mean(timed)
    median_ms = 1000 * statistics.median(timed)
    print(f"step time: mean {mean_ms:.3f} ms, median {median_ms:.3f} ms over steps {warm + 1}..{len(times)} "
          f"({kind}, {backend}, world {world}, torch {torch.__version__})", flush=True)
    return {"kind": kind, "backend": backend, "device": str(device), "torch": torch.__version__,
            "rank": rank, "world_size": world, "steps": args.steps, "losses": losses,
            "step_time_ms_mean": mean_ms, "step_time_ms_median": median_ms,
            "step_times_ms": [1000 * t for t in times]}


def param_checksum(model):
    """Sum of |p| over every parameter, as a float64 repr: identical on every rank when replicas agree."""
    with torch.no_grad():
        return repr(float(sum(p.detach().double().abs().sum().item() for p in model.parameters())))


def write_out(args, rank, result):
    if not args.out or (rank != 0 and "{rank}" not in args.out):
        return
    path = args.out.replace("{rank}", str(rank))
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, path)


def finish():
    """Ends the process group after the last collective (every rank calls it after dist.barrier()).

    It first pauses 0.2 s without the GIL: torch 1.13's gloo worker threads release the last collectives'
    tensors after the ranks already left them, and that needs the GIL. A process group destroyed meanwhile
    (at the interpreter's exit, with the GIL held) joins those threads and waits forever: a hang at exit
    seen once in our Slurm test (the main thread in ~ProcessGroupGloo, a gloo thread in
    PyEval_AcquireThread).
    """
    time.sleep(0.2)
    dist.destroy_process_group()

"""Checks one run of examples/train_{ddp,fsdp}.py (used by tests/integration/75-examples-train.sh).

  check_train.py STDOUT STEPS WORLD [--json PATTERN] [--margin M] [--same-as JSON [--tol T]]

STDOUT: the launcher's captured stdout; "-" checks the --json files alone (a run whose stdout also holds an
earlier attempt's lines): the losses and checksum are then rank 0's file's. Every rank prints `step N loss X` for N = 1..STEPS and one
`params checksum C` line; the loss printed is the mean over the ranks, so all ranks must print the same value
for each step, and the checksums must match (replicas in sync). The loss must go down: mean of the last 5
steps < mean of the first 5 minus M (default 0.5 nats). --json PATTERN ({rank} in it): each rank's --out
file must hold the same losses as stdout. --same-as JSON: the curve must match another run's, step by step,
within T (default 0.01): DDP and FSDP compute the same thing, and so do torch 1.13 and 2.6.
Prints the first-5 / last-5 means; exit 0 when every check holds, 1 with the reason otherwise.
"""
import argparse
import json
import re
import sys


def fail(msg):
    print(f"check_train: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stdout")
    ap.add_argument("steps", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("--json")
    ap.add_argument("--margin", type=float, default=0.5)
    ap.add_argument("--same-as")
    ap.add_argument("--tol", type=float, default=0.01)
    a = ap.parse_args()
    per_step, sums = {}, []
    if a.stdout == "-":
        if not a.json:
            fail("STDOUT '-' needs --json")
        with open(a.json.replace("{rank}", "0")) as f:
            first = json.load(f)
        per_step = {n + 1: [repr(x)] * a.world for n, x in enumerate(first["losses"])}
        sums = [first["params_checksum"]] * a.world
    with open(a.stdout if a.stdout != "-" else "/dev/null", errors="replace") as f:
        for line in f:
            m = re.search(r"\bstep (\d+) loss ([-+0-9.eEnaif]+)\s*$", line)
            if m:
                per_step.setdefault(int(m.group(1)), []).append(m.group(2))
            m = re.search(r"\bparams checksum (\S+)\s*$", line)
            if m:
                sums.append(m.group(1))
    if sorted(per_step) != list(range(1, a.steps + 1)):
        fail(f"{a.stdout}: want `step N loss X` for steps 1..{a.steps}, got steps {sorted(per_step)}")
    losses = []
    for n in range(1, a.steps + 1):
        vals = per_step[n]
        if len(vals) != a.world:
            fail(f"{a.stdout}: step {n} printed by {len(vals)} ranks, want {a.world}")
        if len(set(vals)) != 1:
            fail(f"{a.stdout}: ranks disagree on the loss of step {n}: {vals}")
        losses.append(float(vals[0]))
    if len(sums) != a.world or len(set(sums)) != 1:
        fail(f"{a.stdout}: want {a.world} equal `params checksum` lines, got {sums}")
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"losses {losses[0]:.4f} -> {losses[-1]:.4f}; first-5 mean {first:.4f}, last-5 mean {last:.4f}; "
          f"{a.world} ranks agree, checksum {sums[0]}")
    if not last < first - a.margin:
        fail(f"{a.stdout}: the loss did not go down by {a.margin}: first-5 mean {first:.4f}, last-5 {last:.4f}")
    if a.json:
        for r in range(a.world):
            path = a.json.replace("{rank}", str(r))
            with open(path) as f:
                got = json.load(f)
            if got["rank"] != r or got["world_size"] != a.world or len(got["losses"]) != a.steps:
                fail(f"{path}: rank {got['rank']} world {got['world_size']} {len(got['losses'])} losses")
            if any(abs(x - y) > 5e-6 for x, y in zip(got["losses"], losses)):
                fail(f"{path}: losses differ from the printed ones")
            if got["params_checksum"] != sums[0]:
                fail(f"{path}: checksum {got['params_checksum']} != printed {sums[0]}")
    if a.same_as:
        with open(a.same_as) as f:
            other = json.load(f)["losses"]
        diff = max(abs(x - y) for x, y in zip(other, losses))
        print(f"largest step-by-step difference from {a.same_as}: {diff:.2e}")
        if len(other) != len(losses) or diff > a.tol:
            fail(f"the loss curve differs from {a.same_as} by {diff:.3g} (> {a.tol})")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The training examples (examples/train_ddp.py, examples/train_fsdp.py: a tiny GPT on synthetic data) run 20
# steps on CPU (gloo) through build/trun with 2 workers, and the loss goes down:
#   torch 1.13 (host): DDP trains. FSDP: Debian's torch 1.13 cannot import torch.distributed.fsdp on Python
#     3.11, so the script must say so and exit 77 (trun then exits 1 and names exit code 77 as the root
#     cause); if the host's torch can import FSDP, it must train instead.
#   torch 2.6 (trixie chroot, trun --no-python scripts/chroot-run.sh --keep-env python3 ...): DDP and FSDP train.
# Each run is checked by tests/tools/check_train.py: all 20 steps printed by both ranks with the same loss,
# equal parameter checksums, last-5 mean < first-5 mean - 0.5, the --out JSON files agree with stdout. The
# curves must also agree across runs (1.13 DDP = 2.6 DDP = 2.6 FSDP, step by step within 0.01): same seed,
# same maths. examples/train_ddp.yaml and train_fsdp.yaml run too (torch 1.13; FSDP also with torch 2.6 through a
# PYTHON_EXEC wrapper into the chroot) and must print the same steps as the command-line runs.
# examples/deepspeed/train_zero3.yaml resolves (--print-config) and, without DeepSpeed, exits 77 with its message.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
check() { "$host_py" "$repo/tests/tools/check_train.py" "$@"; }
steps=20
model=(--steps $steps --batch 8 --seq 32 --d-model 64 --layers 2)

# run NAME WANT_RC trun-args...: runs trun from the repository root, keeps stdout/stderr in $tmp/NAME.*.
run() {
  local name=$1 want=$2
  shift 2
  echo "== $name: trun $*"
  set +e
  (cd "$repo" && trun_run "$@") >"$tmp/$name.stdout" 2>"$tmp/$name.stderr"
  local rc=$?
  set -e
  sed 's/^/    /' "$tmp/$name.stdout" "$tmp/$name.stderr" | tail -n 12
  [ $rc -eq "$want" ] || fail "$name: trun exited $rc, want $want (output in $tmp/$name.std*; KEEP_TMP=1 keeps it)"
}

# torch 1.13, DDP
run ddp113 0 --nproc-per-node 2 examples/train_ddp.py "${model[@]}" --out "$tmp/ddp113.{rank}.json"
check "$tmp/ddp113.stdout" $steps 2 --json "$tmp/ddp113.{rank}.json" || fail "ddp113"
grep -q "step time: .*(ddp, gloo, world 2, torch 1.13" "$tmp/ddp113.stdout" || fail "ddp113: no step time line"

# torch 1.13, FSDP: trains if this torch can import FSDP, else the documented skip (exit 77 in every worker).
if "$host_py" -c 'import torch.distributed.fsdp' 2>/dev/null; then
  run fsdp113 0 --nproc-per-node 2 examples/train_fsdp.py "${model[@]}" --out "$tmp/fsdp113.{rank}.json"
  check "$tmp/fsdp113.stdout" $steps 2 --json "$tmp/fsdp113.{rank}.json" || fail "fsdp113"
else
  run fsdp113 1 --nproc-per-node 2 examples/train_fsdp.py "${model[@]}"
  grep -q "train_fsdp.py: skipped: FSDP cannot be used with torch 1.13" "$tmp/fsdp113.stderr" ||
    fail "fsdp113: no 'skipped: FSDP cannot be used' message on stderr"
  grep -Eq "exitcode +: 77 " "$tmp/fsdp113.stderr" || fail "fsdp113: trun's report does not show exit code 77"
  if grep -q "^step " "$tmp/fsdp113.stdout"; then fail "fsdp113: printed steps although FSDP was skipped"; fi
  echo "ok: fsdp113 skipped as documented (torch 1.13 cannot import torch.distributed.fsdp here)"
fi

# The YAML configs: the same arguments as the command-line runs above, so the same curve.
# same_steps NAME REF: NAME printed step lines, and the same ones as REF (every rank prints each step).
same_steps() {
  grep '^step [0-9]' "$tmp/$1.stdout" | sort -u >"$tmp/$1.steps"
  grep '^step [0-9]' "$tmp/$2.stdout" | sort -u >"$tmp/$2.steps"
  [ -s "$tmp/$1.steps" ] || fail "$1: no step lines"
  cmp -s "$tmp/$1.steps" "$tmp/$2.steps" || fail "$1: the loss curve differs from the command-line run $2"
}
run yaml113 0 --config examples/train_ddp.yaml
check "$tmp/yaml113.stdout" $steps 2 || fail "yaml113"
same_steps yaml113 ddp113
if "$host_py" -c 'import torch.distributed.fsdp' 2>/dev/null; then
  run yamlfsdp113 0 --config examples/train_fsdp.yaml
  check "$tmp/yamlfsdp113.stdout" $steps 2 || fail "yamlfsdp113"
  same_steps yamlfsdp113 fsdp113
else
  run yamlfsdp113 1 --config examples/train_fsdp.yaml
  grep -q "train_fsdp.py: skipped: FSDP cannot be used with torch 1.13" "$tmp/yamlfsdp113.stderr" ||
    fail "yamlfsdp113: no 'skipped: FSDP cannot be used' message on stderr"
fi

# examples/deepspeed/train_zero3.yaml: the file resolves (its script exists), and without DeepSpeed (not in
# Debian) the script says so and exits 77. No GPU here, so one worker instead of the file's "gpu".
(cd "$repo" && "$trun" --config examples/deepspeed/train_zero3.yaml --print-config) >"$tmp/ds.config" ||
  fail "deepspeed: --print-config of examples/deepspeed/train_zero3.yaml failed"
grep -qx "script: examples/deepspeed/train_zero3.py  *# file:examples/deepspeed/train_zero3.yaml:[0-9]*" \
  "$tmp/ds.config" || fail "deepspeed: the config's script: $(grep script "$tmp/ds.config")"
grep -q "^args: \['--deepspeed', examples/deepspeed/ds_zero3.json," "$tmp/ds.config" ||
  fail "deepspeed: the config's args: $(grep args "$tmp/ds.config")"
[ -f "$repo/examples/deepspeed/train_zero3.py" ] || fail "deepspeed: the YAML's script does not exist"
if "$host_py" -c 'import deepspeed; deepspeed.initialize' 2>/dev/null; then
  echo "note: deepspeed is installed for $host_py: the ZeRO-3 example's skip path was not checked" >&2
else
  run zero3 1 --config examples/deepspeed/train_zero3.yaml --nproc-per-node 1
  grep -q "^train_zero3.py: skipped: deepspeed cannot be imported in this Python .*: ModuleNotFoundError: No module named 'deepspeed'\. Install it in the workers' Python (pip install deepspeed) to run this example\. Exiting 77\.$" \
    "$tmp/zero3.stderr" || fail "zero3: no 'skipped: deepspeed cannot be imported' message on stderr"
  grep -Eq "exitcode +: 77 " "$tmp/zero3.stderr" || fail "zero3: trun's report does not show exit code 77"
  echo "ok: examples/deepspeed/train_zero3.yaml resolves; without deepspeed the script exits 77 as documented"
fi

need_chroot

# torch 2.6 in the chroot: paths as the chroot sees them (/trun is the repository, /tmp is shared).
chroot_py=(--no-python scripts/chroot-run.sh --keep-env python3)
run ddp26 0 --nproc-per-node 2 "${chroot_py[@]}" /trun/examples/train_ddp.py "${model[@]}" --out "$tmp/ddp26.{rank}.json"
check "$tmp/ddp26.stdout" $steps 2 --json "$tmp/ddp26.{rank}.json" --same-as "$tmp/ddp113.0.json" || fail "ddp26"
grep -q "step time: .*(ddp, gloo, world 2, torch 2.6" "$tmp/ddp26.stdout" || fail "ddp26: no step time line"

run fsdp26 0 --nproc-per-node 2 "${chroot_py[@]}" /trun/examples/train_fsdp.py "${model[@]}" --out "$tmp/fsdp26.{rank}.json"
check "$tmp/fsdp26.stdout" $steps 2 --json "$tmp/fsdp26.{rank}.json" --same-as "$tmp/ddp26.0.json" || fail "fsdp26"
# examples/train_fsdp.yaml with torch 2.6: PYTHON_EXEC (the interpreter trun, like torchrun, starts the script
# with) is a wrapper that runs python3 in the chroot from /trun, so the file's relative script path works as is.
pywrap=$tmp/chroot-python3
printf '#!/bin/sh\nexec %q --keep-env /bin/sh -c %q python3 "$@"\n' "$repo/scripts/chroot-run.sh" \
  'cd /trun && exec python3 "$@"' >"$pywrap"
chmod +x "$pywrap"
echo "== yamlfsdp26: trun --config examples/train_fsdp.yaml (PYTHON_EXEC=$pywrap)"
rc=0
(cd "$repo" && PYTHON_EXEC=$pywrap run_pg "$trun" --config examples/train_fsdp.yaml) \
  >"$tmp/yamlfsdp26.stdout" 2>"$tmp/yamlfsdp26.stderr" || rc=$?
sed 's/^/    /' "$tmp/yamlfsdp26.stdout" "$tmp/yamlfsdp26.stderr" | tail -n 12
[ $rc -eq 0 ] || fail "yamlfsdp26: trun exited $rc, want 0"
check "$tmp/yamlfsdp26.stdout" $steps 2 || fail "yamlfsdp26"
grep -q "torch 2.6" "$tmp/yamlfsdp26.stdout" || fail "yamlfsdp26: the workers did not run torch 2.6"
same_steps yamlfsdp26 fsdp26
grep -Eq "FSDP rank [01]: 2 ranks, gloo on cpu, ([0-9]+) parameters" "$tmp/fsdp26.stdout" || fail "fsdp26: no FSDP line"
# Sharded for real: each rank holds about half of the parameters.
"$host_py" - "$tmp/fsdp26.0.json" "$tmp/fsdp26.1.json" <<'EOF' || fail "fsdp26: parameters not sharded"
import json, sys
for p in sys.argv[1:]:
    d = json.load(open(p))
    frac = d["params_local"] / d["params_total"]
    print(f"{p}: rank {d['rank']} holds {d['params_local']} of {d['params_total']} parameters ({frac:.2f})")
    assert 0.4 < frac < 0.6, frac
EOF
echo PASS

#!/usr/bin/env bash
# trun --standalone runs a gloo all-reduce that every rank checks: torch 1.13 workers on the host
# (--nproc-per-node 2 and 4) and torch 2.6 workers in the trixie chroot (--no-python scripts/chroot-run.sh ...).
# Passes when trun exits 0 and every rank left its ok.<attempt>.<rank> file with the expected torch version.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch

# run_case NAME NPROC TORCH_PREFIX [trun args...]: runs trun, checks rc 0 and one ok file per rank.
run_case() {
  local name=$1 nproc=$2 want=$3
  shift 3
  local out=$tmp/$name
  mkdir -p "$out"
  echo "== $name: trun $*"
  set +e
  trun_run "$@" >"$out.stdout" 2>"$out.stderr"
  local rc=$?
  set -e
  sed 's/^/    /' "$out.stdout" "$out.stderr"
  [ $rc -eq 0 ] || fail "$name: trun exited $rc, want 0"
  for ((r = 0; r < nproc; r++)); do
    [ -f "$out/ok.0.$r" ] || fail "$name: rank $r did not finish its all-reduce (no $out/ok.0.$r)"
    case "$(cat "$out/ok.0.$r")" in "$want"*) ;; *) fail "$name: rank $r ran torch $(cat "$out/ok.0.$r"), want $want" ;; esac
  done
  [ "$(ls "$out" | wc -l)" -eq "$nproc" ] || fail "$name: expected exactly $nproc ok files, got: $(ls "$out")"
  echo "ok: $name"
}

for n in 2 4; do
  run_case "host113-n$n" $n 1.13 --standalone --nproc-per-node $n "$repo/tests/helpers/allreduce.py" "$tmp/host113-n$n"
done

need_chroot
for n in 2 4; do
  run_case "chroot26-n$n" $n 2.6 --standalone --nproc-per-node $n --no-python "$repo/scripts/chroot-run.sh" \
    --keep-env python3 /trun/tests/helpers/allreduce.py "$tmp/chroot26-n$n"
done
echo PASS

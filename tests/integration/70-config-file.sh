#!/usr/bin/env bash
# trun --config: a 2-worker gloo all-reduce (torch 1.13 on the host) whose settings, script and args all come
# from a YAML file; --print-config's values and sources (cli, env, file:line, default, detected:slurm); its
# output fed back as the config of a second run; a bad file exits 2 with file:line:column.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_trun
need_host_torch
export TRUN_PLATFORM=none # this test's own environment must not be taken for a cluster's

# check_ok DIR: both ranks finished their all-reduce with torch 1.13.
check_ok() {
  for r in 0 1; do
    [ -f "$1/ok.0.$r" ] || fail "rank $r did not finish its all-reduce (no $1/ok.0.$r)"
    case "$(cat "$1/ok.0.$r")" in 1.13*) ;; *) fail "rank $r ran torch $(cat "$1/ok.0.$r"), want 1.13" ;; esac
  done
  [ "$(ls "$1" | wc -l)" -eq 2 ] || fail "expected 2 ok files in $1, got: $(ls "$1")"
}

mkdir -p "$tmp/run1" "$tmp/run2"
cat >"$tmp/job.yaml" <<YAML
# a 2-worker job, everything in the file
nproc-per-node: 2
standalone: true
max_restarts: 0
tee: 3
log-dir: $tmp/logs
script: $repo/tests/helpers/allreduce.py
args: [$tmp/run1]
YAML

echo "== trun --config job.yaml"
rc=0
trun_run --config "$tmp/job.yaml" >"$tmp/run1.out" 2>"$tmp/run1.err" || rc=$?
sed 's/^/    /' "$tmp/run1.out" "$tmp/run1.err"
[ $rc -eq 0 ] || fail "trun --config exited $rc"
check_ok "$tmp/run1"
ls "$tmp/logs" | grep -q . || fail "no log directory under the file's log-dir $tmp/logs"
echo "ok: the job ran from the file"

# --print-config: each setting's value and source.
echo "== --print-config"
rc=0
PET_MAX_RESTARTS=2 "$trun" --config "$tmp/job.yaml" --nproc-per-node 2 --print-config >"$tmp/print" 2>&1 || rc=$?
sed 's/^/    /' "$tmp/print"
[ $rc -eq 0 ] || fail "--print-config exited $rc"
want() { # want KEY VALUE SOURCE: the line "KEY: VALUE <spaces> # SOURCE" is there
  grep -Eq "^$1: $2 +# $3\$" "$tmp/print" || fail "--print-config lacks '$1: $2  # $3'"
}
want nproc-per-node 2 cli
want max-restarts 2 "env PET_MAX_RESTARTS"
want standalone true "file:$tmp/job.yaml:3"
want tee 3 "file:$tmp/job.yaml:5"
want role default default
want master-addr 127.0.0.1 default
want script "$repo/tests/helpers/allreduce.py" "file:$tmp/job.yaml:7"
want args "\\[$tmp/run1\\]" "file:$tmp/job.yaml:8"
grep -q '^# platform: none detected$' "$tmp/print" || fail "--print-config does not say that no platform was detected"
echo "ok: --print-config sources"

# Detected values (a Slurm job's environment) fill what nothing else gives, in --print-config and --dry-run.
slurm=(TRUN_PLATFORM=auto SLURM_JOB_ID=991 SLURM_NNODES=2 SLURM_NODEID=1 "SLURM_JOB_NODELIST=gpu-st-[07,09]")
rc=0
env "${slurm[@]}" "$trun" --config "$tmp/job.yaml" --print-config >"$tmp/print-slurm" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "--print-config under Slurm exited $rc: $(cat "$tmp/print-slurm")"
cp "$tmp/print-slurm" "$tmp/print"
want nnodes 2 "detected:slurm \\(SLURM_NNODES\\)"
want node-rank 1 "detected:slurm \\(SLURM_NODEID\\)"
want master-addr gpu-st-07 "detected:slurm \\(SLURM_JOB_NODELIST, first host\\)"
want standalone true "file:$tmp/job.yaml:3"
rc=0
env "${slurm[@]}" "$trun" --dry-run --nproc-per-node 1 "$repo/tests/helpers/allreduce.py" x >"$tmp/dry" 2>&1 || rc=$?
sed 's/^/    /' "$tmp/dry"
[ $rc -eq 0 ] || fail "--dry-run under Slurm exited $rc"
grep -Eq '^master-addr: gpu-st-07 +# detected:slurm' "$tmp/dry" || fail "--dry-run does not show the detected master"
grep -q 'nodes: 2 (this node: group rank 1)  rendezvous: static at gpu-st-07:29500' "$tmp/dry" ||
  fail "--dry-run's plan does not use the detected values"
echo "ok: detected values"

# The printed config is a config file: a second job runs from it alone (script and args replaced on the
# command line, which wins over the file's).
"$trun" --config "$tmp/job.yaml" --print-config >"$tmp/printed.yaml"
rc=0
trun_run --config "$tmp/printed.yaml" "$repo/tests/helpers/allreduce.py" "$tmp/run2" >"$tmp/run2.out" 2>&1 || rc=$?
sed 's/^/    /' "$tmp/run2.out"
[ $rc -eq 0 ] || fail "trun --config <printed config> exited $rc"
check_ok "$tmp/run2"
echo "ok: --print-config output runs as a config file"

# A bad file: exit 2, file:line:column and the suggestion; nothing started.
printf 'nproc-per-node: 2\nnnode: 2\n' >"$tmp/bad.yaml"
rc=0
"$trun" --config "$tmp/bad.yaml" "$repo/tests/helpers/allreduce.py" "$tmp/run3" >"$tmp/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "a bad config file exited $rc, want 2"
[ "$(cat "$tmp/bad.out")" = "trun: error: $tmp/bad.yaml:2:1: unknown key 'nnode'; did you mean 'nnodes'?" ] ||
  fail "bad config message: $(cat "$tmp/bad.out")"
[ ! -e "$tmp/run3" ] || fail "a worker ran despite the bad file"
echo "ok: bad file -> exit 2 with file:line:column"
echo PASS

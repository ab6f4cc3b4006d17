#!/usr/bin/env bash
# runner: alone
# trun under a real Slurm 22.05 cluster (Debian's slurm-wlm + munge): tests/helpers/slurm_cluster.sh starts
# slurmctld on "ctl" and three slurmd nodes n1..n3 (10.253.0.11-13, each its own network + UTS namespace,
# 2 CPUs, 2 stand-in GPUs as GRES), all in a PID/mount namespace that ends with the test. The workers run
# examples/train_ddp.py with Debian's torch 1.13 (gloo). One cluster start; the scenarios, in order:
#   1. srun-detect   srun -N3 --ntasks-per-node=1 trun --nproc-per-node 2 examples/train_ddp.py --steps 20, no
#                    wrapper (trun detects Slurm: 3 nodes, ranks, master n1): exit 0, 6 ranks, the loss falls.
#   2. srun-wrapper  the same through examples/slurm/trun-node.sh (Slurm's variables mapped to torchrun's
#                    options by the script): exit 0, and the same loss curve as 1.
#   3. sbatch        examples/slurm/train.sbatch submitted as its header says for CPU nodes
#                    (PET_NPROC_PER_NODE=2 sbatch --nodes=3 ... --steps 20): JobState=COMPLETED ExitCode=0:0
#                    (scontrol show job), its output file holds the 6 ranks' training.
#   4. scancel       the same job with --steps 100000, scancel'ed once it trains: JobState=CANCELLED, each of
#                    the 3 agents reports the SIGTERM it got, every task exits 1, no slurmstepd, trun or worker
#                    process is left on any node.
#   5. split         two trun agents on one node (srun -N1 --ntasks-per-node=2 --gpus-per-task=1; GPUs from the
#                    fake NVML with the h200x2 fixture, Slurm's CUDA_VISIBLE_DEVICES per task): each agent gets
#                    one worker (SLURM_STEP_GPUS), distinct node ranks (SLURM_PROCID), and the split-pod doctor
#                    warns about 2 agents on host n1 with Slurm's fix.
#   6. lost-static   node n3 dies mid-training (slurm-node-kill: slurmd, slurmstepd, agent, workers SIGKILLed at
#                    once), srun --kill-on-bad-exit=1 and the static backend: srun exits non-zero and node rank
#                    0's job-wide report names node rank 2 on host n3 as the root cause, lost; nothing left.
#   7. lost-elastic  the same with --nnodes 2:3 --rdzv-backend c10d (endpoint from Slurm: n1:29400) and
#                    srun --no-kill: the two survivors restart into a world of 4 ranks and finish (exit 0).
# Killing only the job's processes on n3 while its slurmd lives is not what a lost host looks like to Slurm:
# srun then waits forever for the tasks of a step whose slurmstepd is gone; with slurmd gone too, slurmctld marks
# n3 DOWN after two failed pings (SlurmdTimeout and MessageTimeout, 5 s each here: about 15 s) and srun ends
# the step as on a real cluster.
# After the cluster is gone: no process of the test (TRUN_TEST_MARKER), no network namespace of its nodes in
# the machine's /run/netns, /etc/hosts and /etc/passwd unchanged. Each scenario prints "TIME <name> <seconds>". Exit 0 pass, 77 skip (no namespaces), else fail.
set -u
here=$(cd "$(dirname "$0")" && pwd)

# ---- outside the cluster ---------------------------------------------------------------------------------
if [ "${1:-}" != --in-cluster ]; then
  . "$here/../helpers/mn_lib.sh"
  need_torch
  tmp=$(mktemp -d /tmp/trun-56.XXXXXX)
  trap 'kill_marked; rm -rf "$tmp"' EXIT
  sandbox_snapshot
  t0=$(now)
  T56_TMP=$tmp MARKER=$MARKER "$TRUN_REPO/tests/helpers/slurm_cluster.sh" --nodes 3 --cpus 2 --gpus 2 \
    bash "$0" --in-cluster
  rc=$?
  echo "TIME cluster-total $(elapsed "$t0")"
  sandbox_left n1 n2 n3
  [ $rc != 0 ] || echo "PASS: 7 Slurm scenarios; nothing left behind"
  exit $rc
fi

# ---- inside: the login node of the cluster --------------------------------------------------------------
. "$here/../helpers/mn_lib.sh"
tmp=$T56_TMP
export TMPDIR=$tmp/tmpdir # trun's torchelastic_* log directories
mkdir -p "$TMPDIR"
export TRUN PYTHON_EXEC # every task inherits the environment (srun/sbatch --export=ALL)
cd "$TRUN_REPO"
check_train() { "$TRUN_HOST_PY" "$TRUN_REPO/tests/tools/check_train.py" "$@"; }
model=(--batch 8 --seq 32 --d-model 64 --layers 2)
sc="" sc_t0=""
begin() { sc=$1; sc_t0=$(now); echo "=== $1: $2"; }
end() { echo "TIME $sc $(elapsed "$sc_t0")"; }

# The job's processes on every node (this PID namespace holds only the cluster's).
job_procs() { ps -e -o pid=,args= | grep -E 'slurmstepd|train_ddp\.py|[/ ]trun ' | grep -v grep; }
# Diagnostics for a hang: the process tree, and where each worker waits.
dump_hang() {
  ps -e -o pid,ppid,stat,wchan:24,args --forest | cut -c1-180
  if command -v gdb >/dev/null; then
    for p in $(pgrep -f train_ddp.py); do
      echo "--- worker $p:"; gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>/dev/null | grep -E '^#|^Thread' | head -40
    done
  fi
}
no_job_left() { # WHAT
  wait_for '[ -z "$(job_procs)" ]' 60 || { job_procs; dump_hang; fail "$1: job processes are left (above)"; }
}
# run_srun NAME LIMIT ARGS...: srun ARGS in the background, output in $tmp/NAME.out/.err; waits (safety
# limit LIMIT s); its exit code in SRUN_RC.
run_srun() {
  local name=$1 limit=$2; shift 2
  srun "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  SRUN_PID=$!
  wait_srun "$name" "$limit"
}
wait_srun() { # NAME LIMIT
  if ! wait_pid_exit "$SRUN_PID" "$2"; then
    dump_hang; tail -n 30 "$tmp/$1.out" "$tmp/$1.err"; kill "$SRUN_PID"
    fail "$1: srun still runs after $2 s"
  fi
  SRUN_RC=$WAIT_RC
}
show() { echo "--- $1 stdout (tail):"; tail -n 8 "$tmp/$1.out"; echo "--- $1 stderr:"; grep -vE '^\*+$|OMP_NUM_THREADS' "$tmp/$1.err" | tail -n 40; }
# job_state ID: JobState and ExitCode from scontrol show job.
job_state() { scontrol show job "$1" | grep -oE '(JobState|ExitCode)=[^ ]+' | tr '\n' ' '; }
wait_job_done() { # ID LIMIT
  wait_for "! scontrol show job $1 | grep -qE 'JobState=(PENDING|RUNNING|COMPLETING|CONFIGURING)'" "$2" ||
    { scontrol show job "$1"; dump_hang; fail "job $1 did not end within $2 s"; }
}

# 1 ---------------------------------------------------------------------------------------------------------
begin srun-detect "srun -N3 --ntasks-per-node=1 trun --nproc-per-node 2 examples/train_ddp.py (Slurm detected)"
run_srun s1 300 -N3 --ntasks-per-node=1 "$TRUN" --nproc-per-node 2 examples/train_ddp.py --steps 20 "${model[@]}" \
  --out "$tmp/s1.{rank}.json"
show s1
[ "$SRUN_RC" = 0 ] || fail "srun-detect: srun exited $SRUN_RC"
check_train "$tmp/s1.out" 20 6 --json "$tmp/s1.{rank}.json" || fail "srun-detect: training check"
grep -q "world 6, torch 1.13" "$tmp/s1.out" || fail "srun-detect: no 'world 6, torch 1.13' step time line"
no_job_left srun-detect
end

# 2 ---------------------------------------------------------------------------------------------------------
begin srun-wrapper "srun -N3 --ntasks-per-node=1 examples/slurm/trun-node.sh examples/train_ddp.py"
TRUN_NPROC_PER_NODE=2 run_srun s2 300 -N3 --ntasks-per-node=1 examples/slurm/trun-node.sh examples/train_ddp.py \
  --steps 20 "${model[@]}" --out "$tmp/s2.{rank}.json"
show s2
[ "$SRUN_RC" = 0 ] || fail "srun-wrapper: srun exited $SRUN_RC"
check_train "$tmp/s2.out" 20 6 --json "$tmp/s2.{rank}.json" --same-as "$tmp/s1.0.json" || fail "srun-wrapper: training check"
no_job_left srun-wrapper
end

# 3 ---------------------------------------------------------------------------------------------------------
begin sbatch "PET_NPROC_PER_NODE=2 sbatch --nodes=3 examples/slurm/train.sbatch --steps 20"
jid=$(PET_NPROC_PER_NODE=2 sbatch --parsable --nodes=3 --output="$tmp/%x-%j.out" examples/slurm/train.sbatch \
  --steps 20 "${model[@]}") || fail "sbatch: submission failed"
echo "job $jid"
wait_job_done "$jid" 300
st=$(job_state "$jid")
echo "$st"
out=$tmp/trun-train-$jid.out
echo "--- $out (tail):"; tail -n 6 "$out"
[ "$st" = "JobState=COMPLETED ExitCode=0:0 " ] || { cat "$out"; fail "sbatch: job $jid ended $st"; }
check_train "$out" 20 6 --same-as "$tmp/s1.0.json" || fail "sbatch: training check of $out"
no_job_left sbatch
end

# 4 ---------------------------------------------------------------------------------------------------------
begin scancel "sbatch examples/slurm/train.sbatch --steps 100000, scancel while it trains"
jid=$(PET_NPROC_PER_NODE=2 sbatch --parsable --nodes=3 --output="$tmp/%x-%j.out" examples/slurm/train.sbatch \
  --steps 100000 "${model[@]}") || fail "scancel: submission failed"
out=$tmp/trun-train-$jid.out
wait_for "grep -q '^step 3 loss' '$out' 2>/dev/null" 180 || { cat "$out"; fail "scancel: job $jid did not train"; }
[ "$(job_procs | grep -c 'python3 -u')" = 6 ] || { job_procs; fail "scancel: want 6 workers before scancel"; }
scancel "$jid"
wait_job_done "$jid" 120
st=$(job_state "$jid")
echo "$st"
grep -vE '^step |^\*+$|OMP_NUM_THREADS' "$out"
case $st in "JobState=CANCELLED "*) ;; *) fail "scancel: job $jid ended $st, want CANCELLED" ;; esac
n=$(grep -c "trun: warning: SIGTERM: forwarding it to the workers" "$out")
[ "$n" = 3 ] || fail "scancel: $n agents reported the SIGTERM, want 3"
for k in 0 1 2; do
  grep -q "srun: error: n$((k + 1)): task $k: Exited with exit code 1" "$out" ||
    fail "scancel: task $k on n$((k + 1)) did not exit 1 (trun's code after a signal)"
done
no_job_left scancel
end

# 5 ---------------------------------------------------------------------------------------------------------
begin split "srun -N1 --ntasks-per-node=2 --gpus-per-task=1 trun (two agents on one node)"
fx=$TRUN_REPO/tests/fixtures/nodes/h200x2
TRUN_SYSFS_ROOT=$fx/sys TRUN_DEV_ROOT=$fx/dev TRUN_DMI_ROOT=$fx/dmi TRUN_NVML_LIBRARY=$TRUN_BUILD/libnvidia-ml-fake.so \
  TRUN_FAKE_NVML_TOPO=$fx/nvml.json AWS_EC2_METADATA_DISABLED=true \
  run_srun s5 300 -N1 --ntasks-per-node=2 --gpus-per-task=1 "$TRUN" examples/train_ddp.py --steps 5 --device cpu \
  "${model[@]}"
show s5
[ "$SRUN_RC" = 0 ] || fail "split: srun exited $SRUN_RC"
grep -q "DDP: 2 ranks" "$tmp/s5.out" || fail "split: want one worker per agent (2 ranks): SLURM_STEP_GPUS"
[ "$(grep -c '^params checksum' "$tmp/s5.out")" = 2 ] || fail "split: want 2 ranks to finish"
grep -qE "WARNING \[split\] 2 agents run on one physical host \(same boot id [-0-9a-f]+\): group rank 0 \(host n1, 1 GPU, 1 worker\); group rank 1 \(host n1, 1 GPU, 1 worker\)" \
  "$tmp/s5.out" "$tmp/s5.err" || fail "split: no split-pod warning naming both agents on n1"
grep -q "Slurm: srun --ntasks-per-node=1" "$tmp/s5.out" "$tmp/s5.err" || fail "split: the warning gives no Slurm fix"
no_job_left split
end

# 6 ---------------------------------------------------------------------------------------------------------
lose_n3() { # NAME: once the job trains, n3 dies
  wait_for "grep -q '^step 3 loss' '$tmp/$1.out' 2>/dev/null" 180 || { show "$1"; fail "$1: the job did not train"; }
  echo "n3 dies: $(ip netns pids n3 | wc -l) processes SIGKILLed"
  slurm-node-kill n3
}
begin lost-static "node n3 lost mid-training, static backend, srun --kill-on-bad-exit=1"
srun -N3 --ntasks-per-node=1 --kill-on-bad-exit=1 "$TRUN" --nproc-per-node 2 examples/train_ddp.py --steps 100000 \
  "${model[@]}" >"$tmp/s6.out" 2>"$tmp/s6.err" &
SRUN_PID=$!
lose_n3 s6
wait_srun s6 180
show s6
[ "$SRUN_RC" != 0 ] || fail "lost-static: srun exited 0"
root=$(sed -n '/^Root Cause (first observed failure):/,/^=/p' "$tmp/s6.err")
echo "$root" | grep -q "traceback : node rank 2 (ranks 4-5) on host n3 (10.253.0.13) was lost" ||
  fail "lost-static: node rank 0's report does not name n3 as the lost root cause"
no_job_left lost-static
slurm-node-start n3
wait_for '[ "$(sinfo -h -N -n n3 -o %T)" = idle ]' 60 || { sinfo -N; fail "lost-static: n3 did not come back"; }
end

# 7 ---------------------------------------------------------------------------------------------------------
begin lost-elastic "node n3 lost mid-training, --nnodes 2:3 --rdzv-backend c10d, srun --no-kill"
srun -N3 --ntasks-per-node=1 --no-kill "$TRUN" --nnodes 2:3 --rdzv-backend c10d --rdzv-conf last_call_timeout=2 \
  --max-restarts 3 --nproc-per-node 2 examples/train_ddp.py --steps 20 "${model[@]}" --out "$tmp/s7.{rank}.json" \
  >"$tmp/s7.out" 2>"$tmp/s7.err" &
SRUN_PID=$!
lose_n3 s7
wait_srun s7 240
show s7
[ "$SRUN_RC" = 0 ] || fail "lost-elastic: srun exited $SRUN_RC, want 0 (the survivors finished)"
[ "$(grep -c 'restarting the workers (attempt 1' "$tmp/s7.err")" = 2 ] || fail "lost-elastic: want 2 agents to restart"
# stdout holds both attempts; the restarted one's 4 ranks wrote the --out files: 20 steps, the loss falls.
grep -q "^DDP: 4 ranks" "$tmp/s7.out" || fail "lost-elastic: no restart into a world of 4 ranks"
check_train - 20 4 --json "$tmp/s7.{rank}.json" || fail "lost-elastic: training check of the world of 4"
[ ! -e "$tmp/s7.4.json" ] && [ ! -e "$tmp/s7.5.json" ] || fail "lost-elastic: ranks 4-5 finished on the lost node?"
no_job_left lost-elastic
end
exit 0

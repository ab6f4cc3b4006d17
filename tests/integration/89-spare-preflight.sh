#!/usr/bin/env bash
# --preflight with a spare (issue 30 point 2), on loopback (--local-addr 127.0.0.1..3), the trun and c10d
# backends, --nnodes 2:2, one worker each (a shell loop until $tmp/<part>/stop), GPUs from the fake NVML (two
# per node, UUIDs of their own) and the fake CUDA runtime + NCCL (build/libcuda-nccl-fake.so: all-reduce at
# TRUN_FAKE_BUSBW GB/s; "rank r of n" lines in $TRUN_FAKE_NCCL_DIR/ranks, one directory per communicator):
#   1. h0 and h1 run the all-ranks preflight at the job's first round (world 2, PASS) and train; h2 starts
#      once they do and waits as a spare: while it waits it runs the local preflight on its own 2 GPUs (its
#      log says so, its ranks file shows one communicator of 2), PASS. h1 is stopped (SIGTERM): h2 takes over
#      (its worker runs in a world of 2) without an all-ranks preflight (it says it skips it; nobody runs
#      trun-preflight again: both ranks files unchanged).
#   2. The spare's local preflight FAILs (TRUN_FAKE_BUSBW=0.5 on its node: below PCIe's warn): it leaves
#      while it waits (exit 3, naming the local preflight), it is on the exclusion list (kind preflight),
#      and h0 and h1 train on undisturbed (no worker of theirs restarted).
# Assertions are on outcomes, not times.
set -u
. "$(dirname "$0")/../helpers/mn_lib.sh"
need_cmd ss iproute2
nvml=$TRUN_BUILD/libnvidia-ml-fake.so
fake=$TRUN_BUILD/libcuda-nccl-fake.so
for f in "$nvml" "$fake" "$TRUN_BUILD/trun-preflight"; do [ -e "$f" ] || fail "$f is missing; run make"; done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/trun-89.XXXXXX")
declare -A pid
trap 'kill_marked; [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT

cat >"$tmp/worker.sh" <<'SH'
#!/bin/sh
# one line per start: world size, rank, attempt; runs until the stop file exists
echo "$WORLD_SIZE $RANK $TORCHELASTIC_RESTART_COUNT" >"$1/world.$EL_HOST.$TORCHELASTIC_RESTART_COUNT"
while [ ! -e "$1/stop" ]; do sleep 0.2; done
SH
chmod +x "$tmp/worker.sh"
for n in 0 1 2; do
  d=$tmp/node$n
  mkdir -p "$d/sys" "$d/dev" "$d/dmi"
  : >"$d/xid"
  printf '{"gpus": [{"uuid": "GPU-89000000-0000-4000-8000-0000000000%d0", "name": "NVIDIA H100 80GB HBM3", "pci": "", "memory": 85520809984}, {"uuid": "GPU-89000000-0000-4000-8000-0000000000%d1", "name": "NVIDIA H100 80GB HBM3", "pci": "", "memory": 85520809984}]}\n' \
    "$n" "$n" >"$d/nvml.json"
done

worlds() { cat "$1"/world.* 2>/dev/null | wc -l; }

# run_part PART BACKEND SPARE_BUSBW
run_part() {
  local part=$1 be=$2 busbw=$3 out=$tmp/$1-$2 port n
  mkdir -p "$out/nccl-job" "$out/nccl-spare"
  port=$(free_port)
  start() { # node nccl-dir busbw
    local d=$tmp/node$1
    env TRUN_NVML_LIBRARY="$nvml" TRUN_FAKE_NVML_TOPO="$d/nvml.json" TRUN_FAKE_NVML_XID="$d/xid" \
      TRUN_SYSFS_ROOT="$d/sys" TRUN_DEV_ROOT="$d/dev" TRUN_DMI_ROOT="$d/dmi" TRUN_SHM_PATH="$tmp" \
      TRUN_BOOT_ID="boot-node$1" AWS_EC2_METADATA_DISABLED=true TRUN_CUDART_LIBRARY="$fake" \
      TRUN_NCCL_LIBRARY="$fake" TRUN_FAKE_NCCL_DIR="$2" TRUN_FAKE_BUSBW="$3" EL_HOST="h$1" \
      TRUN_PREFLIGHT_ARGS="--max-bytes 1048576" \
      "$TRUN" --nnodes 2:2 --nproc-per-node 1 --rdzv-backend "$be" --rdzv-endpoint "127.0.0.1:$port" \
      --rdzv-id "pf-$part-$be" --rdzv-conf join_timeout=120,last_call_timeout=1 --preflight \
      --local-addr "127.0.0.$(($1 + 1))" --max-restarts 2 --log-dir "$out/logs$1" --no-python \
      "$tmp/worker.sh" "$out" >"$out/agent$1.out" 2>"$out/agent$1.err" &
    pid[$1]=$!
  }
  dumpp() { local n; for n in 0 1 2; do dump_agent "$part $be agent $n" "$out/agent$n.out" "$out/agent$n.err"; done; }
  start 0 "$out/nccl-job" 327.5
  # h0 hosts the rendezvous store (h1, stopped below, must not)
  wait_for "ss -ltn | grep -q ':$port '" 60 || { dumpp; fail "$part $be: h0 does not serve the rendezvous store"; }
  start 1 "$out/nccl-job" 327.5
  wait_for "[ \$(worlds $out) -ge 2 ]" 120 || { dumpp; fail "$part $be: h0 + h1 did not start their workers"; }
  cat "$out/agent0.out" "$out/agent1.out" | grep -q "^# verdict: PASS: .*expected for socket (2 nodes" ||
    { dumpp; fail "$part $be: no all-ranks PASS over both nodes at the first round"; }
  [ "$(sort "$out/nccl-job/ranks" | tr '\n' ' ')" = "rank 0 of 2 rank 1 of 2 " ] ||
    { dumpp; fail "$part $be: the all-ranks preflight: $(cat "$out/nccl-job/ranks")"; }
  start 2 "$out/nccl-spare" "$busbw"
  if [ "$part" = pass ]; then
    wait_for "grep -q 'the local preflight of this waiting node: PASS' $out/agent2.err" 120 ||
      { dumpp; fail "$part $be: the spare did not run its local preflight while it waited"; }
    grep -q "this node waits as a spare: running the local preflight on its 2 GPU(s)" "$out/agent2.err" ||
      { dumpp; fail "$part $be: the spare does not say it runs the local preflight"; }
    [ "$(sort "$out/nccl-spare/ranks" | tr '\n' ' ')" = "rank 0 of 2 rank 1 of 2 " ] ||
      { dumpp; fail "$part $be: the local preflight's ranks: $(cat "$out/nccl-spare/ranks")"; }
    ! ls "$out"/world.h2.* >/dev/null 2>&1 || { dumpp; fail "$part $be: the spare started a worker while it waited"; }
    kill -TERM "${pid[1]}"
    wait_pid_exit "${pid[1]}" 60 || { dumpp; fail "$part $be: h1 still runs 60 s after SIGTERM"; }
    wait_for "ls $out/world.h2.* >/dev/null 2>&1" 120 || { dumpp; fail "$part $be: the spare did not take over"; }
    awk '$1 != 2 {exit 1}' "$out"/world.h2.* || { dumpp; fail "$part $be: the spare's world: $(cat "$out"/world.h2.*)"; }
    grep -q "joined the job at rendezvous round [1-9][0-9]*: the all-ranks preflight ran at the job's first round without it.*skipped here; local part: PASS" \
      "$out/agent2.err" || { dumpp; fail "$part $be: the spare does not say it skips the all-ranks preflight"; }
    [ "$(wc -l <"$out/nccl-job/ranks")" = 2 ] && [ "$(wc -l <"$out/nccl-spare/ranks")" = 2 ] ||
      { dumpp; fail "$part $be: a preflight ran again at the takeover"; }
    [ "$(grep -c "local rank(s) of" "$out/agent0.err")" = 1 ] ||
      { dumpp; fail "$part $be: h0 ran the all-ranks preflight again"; }
    touch "$out/stop"
    for n in 0 2; do
      wait_pid_exit "${pid[$n]}" 90 || { dumpp; fail "$part $be: h$n still runs after stop"; }
      [ "$WAIT_RC" = 0 ] || { dumpp; fail "$part $be: h$n exited $WAIT_RC, want 0"; }
    done
    echo "ok: $part $be: the spare ran its local preflight while it waited and took over without the all-ranks one"
  else
    local before
    before=$(worlds "$out")
    wait_pid_exit "${pid[2]}" 120 || { dumpp; fail "$part $be: the spare still runs after its local preflight"; }
    [ "$WAIT_RC" = 3 ] || { dumpp; fail "$part $be: the spare exited $WAIT_RC, want 3"; }
    grep -q "failed the local NCCL preflight while it waited in the rendezvous (--preflight): FAIL" \
      "$out/agent2.err" || { dumpp; fail "$part $be: the spare does not name its failed local preflight"; }
    "$TRUN" --list-excluded json --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "pf-$part-$be" >"$out/excl" 2>&1 ||
      { dumpp; cat "$out/excl"; fail "$part $be: --list-excluded"; }
    grep -q '"127.0.0.3"' "$out/excl" && grep -q '"preflight"' "$out/excl" ||
      { dumpp; cat "$out/excl"; fail "$part $be: the spare is not excluded (kind preflight)"; }
    ! ls "$out"/world.h2.* >/dev/null 2>&1 || { dumpp; fail "$part $be: the failed spare started a worker"; }
    [ "$(worlds "$out")" = "$before" ] || { dumpp; fail "$part $be: h0 and h1 restarted for the spare"; }
    touch "$out/stop"
    for n in 0 1; do
      wait_pid_exit "${pid[$n]}" 90 || { dumpp; fail "$part $be: h$n still runs after stop"; }
      [ "$WAIT_RC" = 0 ] || { dumpp; fail "$part $be: h$n exited $WAIT_RC, want 0"; }
    done
    echo "ok: $part $be: the spare whose local preflight failed left (exit 3), excluded; h0 and h1 undisturbed"
  fi
}

for be in ${SPARE_PF_BACKENDS:-trun c10d}; do
  run_part pass "$be" 327.5
  run_part fail "$be" 0.5
done
